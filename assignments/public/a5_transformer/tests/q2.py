from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 2

@test_case(points=1, hidden=False)
def test_q2_small(positional_encoding):
    import math
    import torch
    pe = positional_encoding(3, 4)
    assert isinstance(pe, torch.Tensor) and pe.shape == (3, 4), 'positional_encoding(3, 4) must have shape (3, 4)'
    expected = torch.tensor([[0.0, 1.0, 0.0, 1.0], [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)], [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]])
    assert torch.allclose(pe.float(), expected, atol=1e-06), f'positional_encoding(3, 4) must be\n{expected}\ngot\n{pe}\n(sines in the even features, cosines in the odd)'

