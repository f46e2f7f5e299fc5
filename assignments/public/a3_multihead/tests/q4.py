from otter.test_files import test_case

OK_FORMAT = False

name = "q4"
points = 5

@test_case(points=1, hidden=False)
def test_q4_shape_and_a_small_case(TransformerBlock, causal_mask):
    import torch
    out = TransformerBlock(16, 4, 32)(torch.randn(2, 5, 16))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 16), 'output must have shape (B, N, D)'
    torch.manual_seed(12)
    block, x = (TransformerBlock(8, 2, 16), torch.randn(1, 3, 8))
    with torch.no_grad():
        got = block(x, causal_mask(3))
        h = block.norm1(x + block.attn(x, causal_mask(3)))
        expected = block.norm2(h + block.ff(h))
        dropout = not torch.equal(block.train()(x), block.eval()(x))
    block.train()
    assert not dropout, "your block gives other outputs in training mode than in evaluation mode: it uses dropout; this question's block has none (the grader's PyTorch block is built with dropout=0.0)"
    assert torch.allclose(got, expected, atol=1e-05), "the output differs from norm2(h + ff(h)) with h = norm1(x + attn(x, mask)): the post-LN block adds each sublayer's output to its input, then normalises"

