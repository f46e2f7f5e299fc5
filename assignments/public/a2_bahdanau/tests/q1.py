from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 4

@test_case(points=1, hidden=False)
def test_q1_shape_and_a_small_case(AdditiveScore):
    import torch
    s = AdditiveScore(6, 10, 8)(torch.randn(2, 3, 6), torch.randn(2, 5, 10))
    assert isinstance(s, torch.Tensor) and s.shape == (2, 3, 5), f'scores must have shape (B, L, S) = (2, 3, 5), got {(tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__)}'
    torch.manual_seed(11)
    score = AdditiveScore(2, 3, 4)
    q, k = (torch.randn(1, 1, 2), torch.randn(1, 2, 3))
    with torch.no_grad():
        small = score(q, k)
        expected = torch.stack([score.v(torch.tanh(score.W_q(q[0, 0]) + score.W_k(k[0, j])))[0] for j in range(2)])
    assert small.shape == (1, 1, 2) and torch.allclose(small.flatten(), expected, atol=1e-06), f'for one query and two keys the scores v^T tanh(W_q q + W_k k_j) are {expected.tolist()}; got {small.flatten().tolist()}'

