from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 5

@test_case(points=1, hidden=False)
def test_q3_shapes(attention):
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
        out, w = attention(torch.randn(1, 2, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 5))
        assert out.shape == (1, 2, 5) and w.shape == (1, 2, 3), f'expected output (1, 2, 5) and weights (1, 2, 3), got {tuple(out.shape)} and {tuple(w.shape)}'
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

