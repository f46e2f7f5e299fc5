from otter.test_files import test_case

OK_FORMAT = False

name = "q2"
points = 2

@test_case(points=1, hidden=False)
def test_q2_type_and_values(causal_mask):
    import torch
    m = causal_mask(3)
    assert isinstance(m, torch.Tensor) and m.dtype == torch.bool and (m.shape == (3, 3)), 'causal_mask(3) must be a boolean (3, 3) tensor'
    expected = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
    assert torch.equal(m, expected), f'causal_mask(3) is True where query i may see key j, j <= i:\n{expected.int()}\ngot\n{m.int()}'

