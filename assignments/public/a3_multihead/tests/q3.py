from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 7

@test_case(points=1, hidden=False)
def test_q3_shape(MultiHeadSelfAttention, causal_mask):
    import torch
    out = MultiHeadSelfAttention(16, 4)(torch.randn(2, 5, 16), causal_mask(5))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 16), 'output must have shape (B, N, D) = (2, 5, 16)'

