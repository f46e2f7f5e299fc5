from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 4

@test_case(points=1, hidden=False)
def test_q1_shape(AdditiveScore):
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
        s = AdditiveScore(6, 10, 8)(torch.randn(2, 3, 6), torch.randn(2, 5, 10))
        assert isinstance(s, torch.Tensor) and s.shape == (2, 3, 5), f'scores must have shape (B, L, S) = (2, 3, 5), got {(tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__)}'
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

