from otter.test_files import test_case

OK_FORMAT = False

name = "q3"
points = 4

@test_case(points=1, hidden=False)
def test_q3_uses_your_score(model, AdditiveScore):
    assert model is not None and isinstance(model.decoder.score, AdditiveScore), 'the decoder must use your AdditiveScore: decoder.score = AdditiveScore(...) before building the model'

