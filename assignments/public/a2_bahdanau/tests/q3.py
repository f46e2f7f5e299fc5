from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 4

@test_case(points=1, hidden=False)
def test_q3_uses_your_score(model, AdditiveScore):
    import signal
    import threading

    def too_slow(signum, frame):
        raise AssertionError('this test ran for more than 30 s and was stopped, so that the rest of your notebook is still graded: is a loop in your code much slower than it needs to be?')
    guard = hasattr(signal, 'SIGALRM') and threading.current_thread() is threading.main_thread()
    if guard:
        previous = signal.signal(signal.SIGALRM, too_slow)
        signal.alarm(30)
    try:
        assert model is not None and isinstance(model.decoder.score, AdditiveScore), 'the decoder must use your AdditiveScore: decoder.score = AdditiveScore(...) before building the model'
    finally:
        if guard:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)

