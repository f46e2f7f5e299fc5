from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 3

@test_case(points=1, hidden=False)
def test_q1_self_attention(MultiHeadAttention):
    import signal
    import threading

    def too_slow(signum, frame):
        raise AssertionError('this test ran for more than 30 s and was stopped, so that the rest of your notebook is still graded: is a loop in your code much slower than it needs to be?')
    guard = hasattr(signal, 'SIGALRM') and threading.current_thread() is threading.main_thread()
    if guard:
        previous = signal.signal(signal.SIGALRM, too_slow)
        signal.alarm(30)
    try:
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
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

