from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 5

@test_case(points=1, hidden=False)
def test_q2_rows_sum_to_one(masked_softmax):
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
        w = masked_softmax(torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]]))
        assert w.shape == (2, 3), f"weights must have the scores' shape (2, 3), got {tuple(w.shape)}"
        assert torch.allclose(w.sum(-1), torch.ones(2)), f'each row of weights must sum to 1 (softmax over the keys, the last axis); row sums: {w.sum(-1)}'
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

