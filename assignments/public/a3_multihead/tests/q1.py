from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 3

@test_case(points=1, hidden=False)
def test_q1_shapes(split_heads, merge_heads):
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
        x = torch.randn(2, 5, 12)
        heads = split_heads(x, 3)
        assert heads.shape == (2, 3, 5, 4), f'split_heads must give (B, H, N, E) = (2, 3, 5, 4), got {tuple(heads.shape)}'
        assert merge_heads(heads).shape == (2, 5, 12), 'merge_heads must give back (B, N, D)'
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

