from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 4

@test_case(points=1, hidden=False)
def test_q1_one_block(online_softmax_step):
    import math
    import torch
    torch.manual_seed(1)
    scores, values = (torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    out = online_softmax_step(torch.full((2, 3), -math.inf), torch.zeros(2, 3), torch.zeros(2, 3, 5), scores, values)
    assert isinstance(out, tuple) and len(out) == 3, 'return the three new quantities, (m, l, acc)'
    m, l, acc = out
    assert m.shape == (2, 3) and l.shape == (2, 3) and (acc.shape == (2, 3, 5)), f'm and l must have shape (..., L) = (2, 3), acc (..., L, Ev) = (2, 3, 5); got {tuple(m.shape)}, {tuple(l.shape)}, {tuple(acc.shape)}'
    assert torch.allclose(m, scores.amax(-1)), "after one block from the start, m is the block's largest score"
    assert torch.allclose(acc / l[..., None], torch.softmax(scores, -1) @ values, atol=1e-05), 'after one block from the start, acc / l must be softmax(scores) @ values'
    start = (torch.full((1,), -math.inf), torch.zeros(1), torch.zeros(1, 1))
    m1, l1, _ = online_softmax_step(*start, torch.tensor([[0.0, math.log(3.0)]]), torch.ones(1, 2, 1))
    assert torch.allclose(m1, torch.tensor([math.log(3.0)])) and torch.allclose(l1, torch.tensor([4 / 3])), f'for the scores [0, ln 3] from the start, m = ln 3 and l = exp(0 - m) + exp(ln 3 - m) = 4 / 3 (the sum of exp(score - m), every exponent at most 0); got m = {m1.tolist()}, l = {l1.tolist()}'
    m2, l2, acc2 = online_softmax_step(m, l, acc, scores + 3.0, values)
    both = torch.softmax(torch.cat([scores, scores + 3.0], -1), -1) @ torch.cat([values, values], -2)
    assert torch.allclose(acc2 / l2[..., None], both, atol=1e-05), 'after a second block with larger scores, acc / l must be the softmax over the scores of both blocks times their values: when the maximum grows, rescale the old l and acc by exp(m_old - m_new)'

