from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 3

@test_case(points=1, hidden=False)
def test_q3_shape_and_a_small_case(DecoderBlock):
    import torch
    out = DecoderBlock(16, 4, 32)(torch.randn(2, 3, 16), torch.randn(2, 5, 16))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 3, 16), 'the block must return (B, L, D) = (2, 3, 16)'
    torch.manual_seed(13)
    block, y, memory = (DecoderBlock(8, 2, 16), torch.randn(1, 3, 8), torch.randn(1, 4, 8))
    with torch.no_grad():
        got = block(y, memory)
        h = block.norm1(y + block.self_attn(y, y, torch.ones(3, 3, dtype=torch.bool).tril()))
        h = block.norm2(h + block.cross_attn(h, memory))
        expected = block.norm3(h + block.ff(h))
    assert torch.allclose(got, expected, atol=1e-05), 'the output differs from norm3(h2 + ff(h2)), h2 = norm2(h1 + cross_attn(h1, memory)), h1 = norm1(y + self_attn(y, y, causal)) with the causal mask tril(ones(L, L))'

