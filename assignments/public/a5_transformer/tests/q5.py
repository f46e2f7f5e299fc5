from otter.test_files import test_case

OK_FORMAT = False

name = "q5"
points = 4

@test_case(points=1, hidden=False)
def test_q5_trained(model, DateTransformer, history):
    assert isinstance(model, DateTransformer), 'model must be your DateTransformer: run the training cell as it is'
    assert len(history.loss) == 800, f'the training cell must run its 800 steps, as it is; it ran {len(history.loss)}'

