from otter.test_files import test_case

OK_FORMAT = False

name = "q4"
points = 5

@test_case(points=1, hidden=False)
def test_q4_shapes_and_greedy_decoding(DateTransformer):
    import torch
    torch.manual_seed(4)
    model = DateTransformer(20, 14, d_model=16, num_heads=2, num_layers=1, dim_feedforward=32)
    src, lengths = (torch.randint(4, 20, (3, 7)), torch.tensor([7, 5, 2]))
    out = model(src, lengths, torch.randint(4, 14, (3, 4)))
    assert isinstance(out, tuple) and len(out) == 2, 'forward must return (logits, None)'
    assert out[0].shape == (3, 4, 14), f'logits must have shape (B, L, V) = (3, 4, 14), got {tuple(out[0].shape)}'
    tokens = model.greedy_decode(src, lengths, 6)[0]
    assert tokens.dtype == torch.long and tokens.shape[0] == 3 and (1 <= tokens.shape[1] <= 6), f"greedy_decode must return (tokens (B, L') with L' <= max_len, None), got {tuple(tokens.shape)}"
    from attnlab.data import CharVocab
    with torch.no_grad():
        start = torch.full((3, 1), CharVocab.START, dtype=torch.long)
        first = model(src, lengths, start)[0][:, -1].argmax(-1)
    assert torch.equal(tokens[:, 0], first), f"the first token of greedy_decode must be the argmax of forward's logits after START: expected {first.tolist()}, got {tokens[:, 0].tolist()} (START itself is not part of the tokens returned)"

