from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 4

@test_case(points=1, hidden=False)
def test_q1_one_block(online_softmax_step):
    import signal
    import threading

    def too_slow(signum, frame):
        raise AssertionError('this test ran for more than 30 s and was stopped, so that the rest of your notebook is still graded: is a loop in your code much slower than it needs to be?')
    guard = hasattr(signal, 'SIGALRM') and threading.current_thread() is threading.main_thread()
    if guard:
        previous = signal.signal(signal.SIGALRM, too_slow)
        signal.alarm(30)
    try:
        import math
        import torch
        torch.manual_seed(1)
        scores, values = (torch.randn(2, 3, 4), torch.randn(2, 4, 5))
        out = online_softmax_step(torch.full((2, 3), -math.inf), torch.zeros(2, 3), torch.zeros(2, 3, 5), scores, values)
        assert isinstance(out, tuple) and len(out) == 3, 'return the three new quantities, (m, l, acc)'
        m, l, acc = out
        assert m.shape == (2, 3) and l.shape == (2, 3) and (acc.shape == (2, 3, 5)), f'm and l must have shape (..., L) = (2, 3), acc (..., L, Ev) = (2, 3, 5); got {tuple(m.shape)}, {tuple(l.shape)}, {tuple(acc.shape)}'
        assert torch.allclose(m, scores.amax(-1)), "after one block from the start, m is the block's largest score"
        assert torch.allclose(acc / l[..., None], torch.softmax(scores, -1) @ values, atol=1e-05), 'after one block from the start, acc / l must be softmax(scores) @ values'
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

