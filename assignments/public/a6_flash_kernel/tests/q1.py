from otter.test_files import test_case

OK_FORMAT = False

name = "q1"
points = 8

@test_case(points=1, hidden=False)
def test_q1_two_blocks(flash_forward):
    import math
    import torch
    import triton
    device = 'cuda' if torch.cuda.is_available() else 'cpu'

    def reference(q, k, v, causal=False):
        s = q.double() @ k.double().transpose(1, 2) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -math.inf)
        return (torch.softmax(s, -1) @ v.double(), torch.logsumexp(s, -1))

    def run(q, k, v, causal=False, block_l=16, block_s=16):
        N, L, E = q.shape
        out, lse = (torch.zeros_like(q), torch.zeros(N, L, device=q.device))
        flash_forward[triton.cdiv(L, block_l), N](q.contiguous(), k.contiguous(), v.contiguous(), out, lse, L, k.shape[1], 1 / math.sqrt(E), E=E, BLOCK_L=block_l, BLOCK_S=block_s, CAUSAL=causal)
        return (out, lse)
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 32, 16, device=device) for _ in range(3))
    out, _ = run(q, k, v)
    want, _ = reference(q, k, v)
    assert out.shape == (2, 32, 16), f'the output must have shape (N, L, E) = (2, 32, 16), got {tuple(out.shape)}'
    assert torch.allclose(out.double(), want, atol=1e-05), 'with 32 keys in two blocks of 16 the output differs from softmax(Q K^T / sqrt(E)) V: fold each block into m, l and acc, and rescale l and acc by exp(m_old - m_new) when the maximum grows'
    k[:, 16:] *= 8.0
    out, _ = run(q, k, v)
    want, _ = reference(q, k, v)
    assert torch.isfinite(out).all() and torch.allclose(out.double(), want, atol=1e-05), 'when a later block has much larger scores, the output is wrong: the sums of the earlier blocks were taken relative to the old maximum; multiply l and acc by exp(m_old - m_new)'

