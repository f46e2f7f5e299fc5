from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 5

@test_case(points=1, hidden=False)
def test_q2_small(blockwise_attention):
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
        torch.manual_seed(5)
        q, k, v = (torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3))
        naive = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), -1) @ v
        for block_size in (7, 3):
            out = blockwise_attention(q, k, v, block_size)
            assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 3), f"the output must have shape (..., L, Ev) = (2, 5, 3), got {getattr(out, 'shape', out)}"
            assert torch.allclose(out, naive, atol=1e-05), f'with block_size={block_size} the output differs from softmax(Q K^T / sqrt(E)) V'
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

