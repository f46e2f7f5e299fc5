from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 5

@test_case(points=1, hidden=False)
def test_q3_shapes_and_a_small_case(attention):
    import torch
    out, w = attention(torch.randn(1, 2, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 5))
    assert out.shape == (1, 2, 5) and w.shape == (1, 2, 3), f'expected output (1, 2, 5) and weights (1, 2, 3), got {tuple(out.shape)} and {tuple(w.shape)}'
    import math
    out, w = attention(torch.tensor([[[math.log(3.0)]]]), torch.tensor([[[1.0], [0.0]]]), torch.tensor([[[4.0], [8.0]]]))
    assert torch.allclose(w, torch.tensor([[[0.75, 0.25]]])), f'for the query [ln 3] and the keys [1] and [0] (E = 1) the weights are softmax([ln 3, 0]) = [0.75, 0.25]; got {w.flatten().tolist()}'
    assert torch.allclose(out, torch.tensor([[[5.0]]])), f'with the values [4] and [8] the output is 0.75 * 4 + 0.25 * 8 = 5; got {out.flatten().tolist()}'

