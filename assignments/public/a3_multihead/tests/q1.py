from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 3

@test_case(points=1, hidden=False)
def test_q1_shapes(split_heads, merge_heads):
    import torch
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4), f'split_heads must give (B, H, N, E) = (2, 3, 5, 4), got {tuple(heads.shape)}'
    assert merge_heads(heads).shape == (2, 5, 12), 'merge_heads must give back (B, N, D)'

