from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 5

@test_case(points=1, hidden=False)
def test_q3_shapes(attention):
    import torch
    out, w = attention(torch.randn(1, 2, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 5))
    assert out.shape == (1, 2, 5) and w.shape == (1, 2, 3), f'expected output (1, 2, 5) and weights (1, 2, 3), got {tuple(out.shape)} and {tuple(w.shape)}'

