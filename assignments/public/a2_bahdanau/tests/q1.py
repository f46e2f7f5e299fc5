from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 4

@test_case(points=1, hidden=False)
def test_q1_shape(AdditiveScore):
    import torch
    s = AdditiveScore(6, 10, 8)(torch.randn(2, 3, 6), torch.randn(2, 5, 10))
    assert isinstance(s, torch.Tensor) and s.shape == (2, 3, 5), f'scores must have shape (B, L, S) = (2, 3, 5), got {(tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__)}'

