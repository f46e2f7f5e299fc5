from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 5

@test_case(points=1, hidden=False)
def test_q2_small(blockwise_attention):
    import math
    import torch
    torch.manual_seed(5)
    q, k, v = (torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3))
    naive = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), -1) @ v
    for block_size in (7, 3):
        out = blockwise_attention(q, k, v, block_size)
        assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 3), f"the output must have shape (..., L, Ev) = (2, 5, 3), got {getattr(out, 'shape', out)}"
        assert torch.allclose(out, naive, atol=1e-05), f'with block_size={block_size} the output differs from softmax(Q K^T / sqrt(E)) V'

