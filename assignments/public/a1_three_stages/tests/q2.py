from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 5

@test_case(points=1, hidden=False)
def test_q2_rows_sum_to_one(masked_softmax):
    import torch
    w = masked_softmax(torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]]))
    assert w.shape == (2, 3), f"weights must have the scores' shape (2, 3), got {tuple(w.shape)}"
    assert torch.allclose(w.sum(-1), torch.ones(2)), f'each row of weights must sum to 1 (softmax over the keys, the last axis); row sums: {w.sum(-1)}'

