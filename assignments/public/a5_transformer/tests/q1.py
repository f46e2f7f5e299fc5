from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 3

@test_case(points=1, hidden=False)
def test_q1_self_attention(MultiHeadAttention):
    import torch
    from torch import nn
    torch.manual_seed(1)
    D, H = (16, 4)
    theirs, ours = (nn.MultiheadAttention(D, H, batch_first=True), MultiHeadAttention(D, H))
    with torch.no_grad():
        for proj, w, b in zip([ours.q_proj, ours.k_proj, ours.v_proj], theirs.in_proj_weight.split(D), theirs.in_proj_bias.split(D)):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        ours.out_proj.load_state_dict(theirs.out_proj.state_dict())
    x = torch.randn(2, 5, D)
    got = ours(x, x)
    assert isinstance(got, torch.Tensor) and got.shape == (2, 5, D), 'the output must have shape (B, L, D) = (2, 5, 16)'
    assert torch.allclose(got, theirs(x, x, x, need_weights=False)[0], atol=1e-05), "self-attention differs from nn.MultiheadAttention's with the same weights: split into heads (reshape to (B, N, H, E), then transpose), scale each head's scores by 1 / sqrt(E), E = D / H, and merge the heads back before out_proj"

