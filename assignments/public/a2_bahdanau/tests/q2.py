from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 5

@test_case(points=1, hidden=False)
def test_q2_shapes(attend, AdditiveScore):
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
        out = attend(AdditiveScore(6, 10), torch.randn(2, 6), torch.randn(2, 5, 10), torch.tensor([5, 3]))
        assert isinstance(out, tuple) and len(out) == 2, 'attend must return (context, weights)'
        context, weights = out
        assert context.shape == (2, 10) and weights.shape == (2, 5), f'expected context (2, 10) and weights (2, 5), got {tuple(context.shape)} and {tuple(weights.shape)}'
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

