from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 5

@test_case(points=1, hidden=False)
def test_q2_shapes(attend, AdditiveScore):
    import torch
    out = attend(AdditiveScore(6, 10), torch.randn(2, 6), torch.randn(2, 5, 10), torch.tensor([5, 3]))
    assert isinstance(out, tuple) and len(out) == 2, 'attend must return (context, weights)'
    context, weights = out
    assert context.shape == (2, 10) and weights.shape == (2, 5), f'expected context (2, 10) and weights (2, 5), got {tuple(context.shape)} and {tuple(weights.shape)}'

