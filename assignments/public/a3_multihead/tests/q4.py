from otter.test_files import test_case

OK_FORMAT = False

name = "q4"
points = 5

@test_case(points=1, hidden=False)
def test_q4_shape(TransformerBlock):
    import torch
    out = TransformerBlock(16, 4, 32)(torch.randn(2, 5, 16))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 16), 'output must have shape (B, N, D)'

