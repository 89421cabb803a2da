import numpy as np
import torch

from workbench.analysis import (
    adjacency_diff,
    adjacency_from_edges,
    bead_adjacency,
    edge_count,
    residue_adjacency,
)


def _brute_force(pos: np.ndarray, cutoff: float) -> np.ndarray:
    adj = np.zeros((pos.shape[0], pos.shape[0]), dtype=bool)
    for i, p in enumerate(pos):
        adj[i] = np.sqrt(((pos - p) ** 2).sum(axis=1)) < cutoff
        adj[i, i] = False
    return adj


def _positions(rng, replicas=3, n=40):
    return torch.from_numpy(rng.uniform(0.0, 20.0, size=(replicas, n, 3)))


def test_bead_adjacency_matches_brute_force():
    rng = np.random.default_rng(0)
    pos = _positions(rng)
    adj = bead_adjacency(pos, 6.0)
    assert adj.dtype == torch.bool and adj.shape == (3, 40, 40)
    for r in range(3):
        np.testing.assert_array_equal(adj[r].numpy(), _brute_force(pos[r].numpy(), 6.0))
        torch.testing.assert_close(bead_adjacency(pos[r], 6.0), adj[r])
    assert torch.equal(adj, adj.transpose(1, 2))
    assert not adj.diagonal(dim1=1, dim2=2).any()


def test_bead_adjacency_is_strict():
    pos = torch.tensor([[0.0, 0.0, 0.0], [5.0, 0.0, 0.0], [0.0, 3.0, 4.0]])
    assert not bead_adjacency(pos, 5.0)[0].any()
    assert bead_adjacency(pos, 5.001)[0, 1:].all()


def _graph(adj: torch.Tensor, padding: int):
    """Flattened directed edges of a batched adjacency, sorted by dst, padded."""
    replicas, n, _ = adj.shape
    r, i, j = torch.nonzero(adj, as_tuple=True)
    dst, src = r * n + i, r * n + j
    order = torch.argsort(dst, stable=True)
    fill = torch.full((padding,), replicas * n)
    return torch.cat([src[order], fill]), torch.cat([dst[order], fill])


def test_adjacency_from_edges_round_trip():
    rng = np.random.default_rng(1)
    adj = bead_adjacency(_positions(rng), 7.0)
    src, dst = _graph(adj, padding=17)
    for r in range(3):
        recovered = adjacency_from_edges(src, dst, 40, r)
        assert torch.equal(recovered, adj[r])
        assert edge_count(recovered).item() == int(((src // 40) == r).sum())


def test_adjacency_from_edges_orientation():
    # one directed edge from bead 1 into bead 3 of replica 1 (n = 4)
    adj = adjacency_from_edges(torch.tensor([5]), torch.tensor([7]), 4, 1)
    expected = torch.zeros(4, 4, dtype=torch.bool)
    expected[3, 1] = True
    assert torch.equal(adj, expected)
    assert not adjacency_from_edges(torch.tensor([5]), torch.tensor([7]), 4, 0).any()


def test_residue_adjacency_matches_brute_force():
    rng = np.random.default_rng(2)
    pos = _positions(rng, replicas=2, n=45)
    # every residue owns at least one bead
    bead_residue = torch.from_numpy(np.sort(np.r_[np.arange(10), rng.integers(0, 10, 35)]))
    bead_adj = bead_adjacency(pos, 5.0)
    res_adj = residue_adjacency(bead_adj, bead_residue, 10)
    assert res_adj.shape == (2, 10, 10) and res_adj.dtype == torch.bool
    for r in range(2):
        expected = np.zeros((10, 10), dtype=bool)
        for i, j in zip(*np.nonzero(bead_adj[r].numpy()), strict=True):
            a, b = int(bead_residue[i]), int(bead_residue[j])
            if a != b:
                expected[a, b] = True
        np.testing.assert_array_equal(res_adj[r].numpy(), expected)
        assert torch.equal(residue_adjacency(bead_adj[r], bead_residue, 10), res_adj[r])
    assert not res_adj.diagonal(dim1=1, dim2=2).any()
    assert torch.equal(res_adj, res_adj.transpose(1, 2))


def test_residue_adjacency_hand_example():
    # residues: beads {0, 1}, {2}, {3, 4}; beads 1-2 and 0-1 touch
    bead_adj = torch.zeros(5, 5, dtype=torch.bool)
    for i, j in [(1, 2), (0, 1)]:
        bead_adj[i, j] = bead_adj[j, i] = True
    res = residue_adjacency(bead_adj, torch.tensor([0, 0, 1, 2, 2]), 3)
    expected = torch.tensor([[False, True, False], [True, False, False], [False, False, False]])
    assert torch.equal(res, expected)


def test_adjacency_diff_and_edge_count():
    previous = torch.tensor([[False, True, True], [True, False, False], [True, False, False]])
    current = torch.tensor([[False, True, False], [True, False, True], [False, True, False]])
    added, removed = adjacency_diff(previous, current)
    assert torch.equal(added, current & ~previous)
    assert added.nonzero().tolist() == [[1, 2], [2, 1]]
    assert removed.nonzero().tolist() == [[0, 2], [2, 0]]
    assert edge_count(previous).item() == 4
    assert edge_count(torch.stack([previous, current, added])).tolist() == [4, 4, 2]
    assert edge_count(previous).dtype == torch.int64


def test_diff_of_moving_replicas():
    rng = np.random.default_rng(3)
    pos = _positions(rng)
    before = bead_adjacency(pos, 6.0)
    after = bead_adjacency(pos + torch.from_numpy(rng.normal(0.0, 1.0, pos.shape)), 6.0)
    added, removed = adjacency_diff(before, after)
    assert not (added & removed).any()
    assert torch.equal((before | added) & ~removed, after)
    torch.testing.assert_close(
        edge_count(after), edge_count(before) + edge_count(added) - edge_count(removed)
    )
