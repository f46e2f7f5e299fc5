from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 3

@test_case(points=1, hidden=False)
def test_q1_shape_and_a_small_case(dot_scores):
    import torch
    scores = dot_scores(torch.randn(2, 3, 8), torch.randn(2, 5, 8))
    assert isinstance(scores, torch.Tensor), f'dot_scores must return a tensor, got {type(scores).__name__}'
    assert scores.shape == (2, 3, 5), f'scores must have shape (batch, L, S) = (2, 3, 5), got {tuple(scores.shape)}: multiply the queries by the transposed keys, query @ key.transpose(-2, -1)'
    small = dot_scores(torch.tensor([[[1.0, 2.0, 0.0, 0.0]]]), torch.tensor([[[2.0, 1.0, 0.0, 0.0], [0.0, 1.0, 3.0, 4.0]]]))
    assert torch.allclose(small, torch.tensor([[[2.0, 1.0]]])), f'for q = [1, 2, 0, 0] and the keys [2, 1, 0, 0] and [0, 1, 3, 4] (E = 4) the scores are q . k / sqrt(4) = [4 / 2, 2 / 2] = [2, 1]; got {small.flatten().tolist()}'

