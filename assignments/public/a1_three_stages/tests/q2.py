from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 5

@test_case(points=1, hidden=False)
def test_q2_rows_sum_to_one_and_a_small_case(masked_softmax):
    import torch
    w = masked_softmax(torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]]))
    assert w.shape == (2, 3), f"weights must have the scores' shape (2, 3), got {tuple(w.shape)}"
    assert torch.allclose(w.sum(-1), torch.ones(2)), f'each row of weights must sum to 1 (softmax over the keys, the last axis); row sums: {w.sum(-1)}'
    import math
    small = masked_softmax(torch.tensor([[0.0, math.log(3.0)]]))
    assert torch.allclose(small, torch.tensor([[0.25, 0.75]])), f'the softmax of the scores [0, ln 3] is [1, 3] / 4 = [0.25, 0.75]; got {small.flatten().tolist()}'
    small = masked_softmax(torch.tensor([[0.0, 5.0, math.log(3.0)]]), torch.tensor([[True, False, True]]))
    assert torch.allclose(small, torch.tensor([[0.25, 0.0, 0.75]])), f'with the mask [True, False, True] (True: the key takes part) the scores [0, 5, ln 3] give the weights [0.25, 0, 0.75]; got {small.flatten().tolist()}'

