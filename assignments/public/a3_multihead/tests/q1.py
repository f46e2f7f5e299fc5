from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 3

@test_case(points=1, hidden=False)
def test_q1_shapes_and_a_small_case(split_heads, merge_heads):
    import torch
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4), f'split_heads must give (B, H, N, E) = (2, 3, 5, 4), got {tuple(heads.shape)}'
    assert merge_heads(heads).shape == (2, 5, 12), 'merge_heads must give back (B, N, D)'
    x = torch.arange(12.0).reshape(1, 2, 6)
    heads = split_heads(x, 3)
    assert torch.equal(heads[0, 1], torch.tensor([[2.0, 3.0], [8.0, 9.0]])), f'for x = [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]] (one sequence of two positions) and 3 heads, head 1 holds features 2 and 3 of each position, [[2, 3], [8, 9]]; got {heads[0, 1].tolist()}'
    assert torch.equal(merge_heads(heads), x), 'merge_heads(split_heads(x, 3)) must give x back'

