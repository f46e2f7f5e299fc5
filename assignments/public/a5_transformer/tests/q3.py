from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 3

@test_case(points=1, hidden=False)
def test_q3_shape(DecoderBlock):
    import torch
    out = DecoderBlock(16, 4, 32)(torch.randn(2, 3, 16), torch.randn(2, 5, 16))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3, 16), 'the block must return (B, L, D) = (2, 3, 16)'

