from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 7

@test_case(points=1, hidden=False)
def test_q3_shape_and_a_small_case(MultiHeadSelfAttention, causal_mask):
    import torch
    out = MultiHeadSelfAttention(16, 4)(torch.randn(2, 5, 16), causal_mask(5))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 16), 'output must have shape (B, N, D) = (2, 5, 16)'
    mha = MultiHeadSelfAttention(4, 2)
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.weight.copy_(torch.eye(4))
            proj.bias.zero_()
    x = torch.tensor([[[1.0, 0.0, 0.0, 1.0], [0.0, 2.0, 1.0, 0.0]]])
    with torch.no_grad():
        got = mha(x)
        expected = torch.cat([torch.softmax(x_h @ x_h.transpose(-2, -1) / 2 ** 0.5, -1) @ x_h for x_h in (x[..., 0:2], x[..., 2:4])], dim=-1)
        only_key_1 = mha(x, torch.tensor([[False, True], [False, True]]))
    assert torch.allclose(got, expected, atol=1e-06), f'with two heads of E = 2 and identity projections, x = {x[0].tolist()} gives {expected[0].tolist()} (each head scaled by 1 / sqrt(E) = 1 / sqrt(2)); got {got[0].tolist()}'
    assert torch.allclose(only_key_1, x[:, [1, 1]]), f'with the mask [[False, True], [False, True]] (True: the key takes part) both positions see key 1 only, so both outputs are its value {x[0, 1].tolist()}; got {only_key_1[0].tolist()}'

