from otter.test_files import test_case

OK_FORMAT = False

name = "q5"
points = 4

@test_case(points=1, hidden=False)
def test_q5_trained(model, DateTransformer, history):
    import signal
    import threading

    def too_slow(signum, frame):
        raise AssertionError('this test ran for more than 30 s and was stopped, so that the rest of your notebook is still graded: is a loop in your code much slower than it needs to be?')
    guard = hasattr(signal, 'SIGALRM') and threading.current_thread() is threading.main_thread()
    if guard:
        previous = signal.signal(signal.SIGALRM, too_slow)
        signal.alarm(30)
    try:
        assert isinstance(model, DateTransformer), 'model must be your DateTransformer: run the training cell as it is'
        assert len(history.loss) == 800, f'the training cell must run its 800 steps, as it is; it ran {len(history.loss)}'
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

