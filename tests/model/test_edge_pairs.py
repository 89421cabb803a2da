"""One filter per unordered pair: pairing of a symmetric edge list, and rows spread back."""

import torch

from workbench.model.edge_pairs import edge_pairs, pair_rows


def symmetric_edges(num_nodes=30, cutoff=0.45, pad=7, seed=0):
    """All pairs of random points within ``cutoff``, both directions, in shuffled order,
    with ``pad`` padding slots (endpoints ``num_nodes``) mixed in."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(num_nodes, 3, generator=g)
    i, j = torch.nonzero(torch.cdist(pos, pos) < cutoff, as_tuple=True)
    keep = i != j
    src = torch.cat([j[keep], torch.full((pad,), num_nodes)])
    dst = torch.cat([i[keep], torch.full((pad,), num_nodes)])
    order = torch.randperm(src.numel(), generator=g)
    return src[order], dst[order]


def test_every_pair_has_one_slot_shared_by_both_directions():
    n = 30
    src, dst = symmetric_edges(n)
    pairs = edge_pairs(src, dst, n)
    valid = dst < n
    assert pairs.used.sum() * 2 == valid.sum()
    assert pairs.forward.numel() == src.numel() // 2 + 1 and not pairs.used[-1]
    fwd, bwd = pairs.forward[pairs.used], pairs.backward[pairs.used]
    assert (src[fwd] < dst[fwd]).all()
    assert torch.equal(src[fwd], dst[bwd]) and torch.equal(dst[fwd], src[bwd])
    slot = pairs.slot[valid]
    assert pairs.used[slot].all()
    assert torch.equal(torch.bincount(slot, minlength=pairs.used.numel())[pairs.used],
                       torch.full((int(pairs.used.sum()),), 2))
    ends = pairs.forward[pairs.slot]  # each edge's pair representative has its endpoints
    assert torch.equal(torch.minimum(src, dst)[valid], src[ends][valid])
    assert torch.equal(torch.maximum(src, dst)[valid], dst[ends][valid])
    assert (pairs.slot[~valid] == pairs.used.numel() - 1).all()


def test_pair_rows_and_their_gradient():
    n = 30
    src, dst = symmetric_edges(n, seed=1)
    pairs = edge_pairs(src, dst, n)
    rows = torch.randn(pairs.used.numel(), 5, dtype=torch.float64, requires_grad=True)
    out = pair_rows(rows, pairs)
    assert torch.equal(out, rows.detach()[pairs.slot])
    grad = torch.randn_like(out)
    grad[dst >= n] = 0.0  # callers mask padding edges
    (got,) = torch.autograd.grad(out, rows, grad)
    (want,) = torch.autograd.grad(rows[pairs.slot], rows, grad)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


def test_no_edges():
    empty = torch.zeros(0, dtype=torch.long)
    pairs = edge_pairs(empty, empty, 4)
    assert pairs.slot.numel() == 0 and pairs.used.tolist() == [False]
    rows = torch.ones(1, 3, requires_grad=True)
    out = pair_rows(rows, pairs)
    assert out.shape == (0, 3)
    (grad,) = torch.autograd.grad(out.sum(), rows)
    assert torch.equal(grad, torch.zeros(1, 3))
