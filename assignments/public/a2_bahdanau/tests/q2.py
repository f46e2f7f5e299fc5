from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 5

@test_case(points=1, hidden=False)
def test_q2_shapes_and_a_small_case(attend, AdditiveScore):
    import torch
    out = attend(AdditiveScore(6, 10), torch.randn(2, 6), torch.randn(2, 5, 10), torch.tensor([5, 3]))
    assert isinstance(out, tuple) and len(out) == 2, 'attend must return (context, weights)'
    context, weights = out
    assert context.shape == (2, 10) and weights.shape == (2, 5), f'expected context (2, 10) and weights (2, 5), got {tuple(context.shape)} and {tuple(weights.shape)}'
    assert float(weights[1, 3:].detach().abs().max()) == 0.0, f'source 1 has length 3, so its positions 3 and 4 are padding and get no weight; got {weights[1].detach().tolist()}'
    assert torch.allclose(weights.sum(-1), torch.ones(2)), f'each row of weights must sum to 1, got {weights.sum(-1).tolist()}'
    keys = torch.arange(10.0).repeat(2, 5, 1) + torch.arange(5.0)[None, :, None]
    context, weights = attend(AdditiveScore(6, 10), torch.randn(2, 6), keys, torch.tensor([5, 3]))
    assert torch.allclose(context, (weights[:, :, None] * keys).sum(1), atol=1e-05), 'the context must be the weighted sum of the keys, sum_s weights[b, s] * keys[b, s]'

