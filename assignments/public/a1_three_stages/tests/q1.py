from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 3

@test_case(points=1, hidden=False)
def test_q1_shape(dot_scores):
    import torch
    scores = dot_scores(torch.randn(2, 3, 8), torch.randn(2, 5, 8))
    assert isinstance(scores, torch.Tensor), f'dot_scores must return a tensor, got {type(scores).__name__}'
    assert scores.shape == (2, 3, 5), f'scores must have shape (batch, L, S) = (2, 3, 5), got {tuple(scores.shape)}: multiply the queries by the transposed keys, query @ key.transpose(-2, -1)'

