from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 4

@test_case(points=1, hidden=False)
def test_q3_uses_your_score(model, AdditiveScore, history):
    books = [c.__name__ for c in type(model.decoder.score).__mro__ if c.__module__.startswith('attnlab')]
    assert isinstance(model.decoder.score, AdditiveScore) and (not books), 'the decoder must use your AdditiveScore, a class of your own: decoder.score = AdditiveScore(...) before building the model'
    assert len(history.loss) == 250, f'the training cell must run its 250 steps, as it is; it ran {len(history.loss)}'

