from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 2

@test_case(points=1, hidden=False)
def test_q2_type_and_values(causal_mask):
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
        m = causal_mask(3)
        assert isinstance(m, torch.Tensor) and m.dtype == torch.bool and (m.shape == (3, 3)), 'causal_mask(3) must be a boolean (3, 3) tensor'
        expected = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
        assert torch.equal(m, expected), f'causal_mask(3) is True where query i may see key j, j <= i:\n{expected.int()}\ngot\n{m.int()}'
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

