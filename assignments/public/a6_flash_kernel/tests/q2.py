from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 2

@test_case(points=1, hidden=False)
def test_q2_by_hand(weights_from_lse):
    import math
    import torch
    q = torch.zeros(1, 1, 16)
    q[0, 0, 0] = 4.0
    k = torch.zeros(1, 2, 16)
    k[0, 1, 0] = math.log(3.0)
    P = weights_from_lse(q, k, torch.tensor([[math.log(4.0)]]))
    assert P.shape == (1, 1, 2), f'P must have shape (N, L, S) = (1, 1, 2), got {tuple(P.shape)}'
    assert torch.allclose(P, torch.tensor([[[0.25, 0.75]]])), f'the scores q . k / sqrt(E) are [0, ln 3] and lse = ln 4, so P = exp(s - lse) = [1/4, 3/4]; got {P.tolist()}'

