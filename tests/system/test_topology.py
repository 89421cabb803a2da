import itertools

import numpy as np
import pytest
import torch

from workbench.system import build_system
from workbench.system.topology import (
    UNREACHABLE,
    bonded_exclusions,
    dihedral_kinds,
    graph_distances,
    nonbonded_pairs,
)

PROTEINS = ["cln025", "2jof", "1yrf", "1enh", "2a3d"]


def _terminal_split(system, terms):
    """Sizes of the (N-terminal, bulk, C-terminal) groups of docs/mlcg-format.md §8.1."""
    residue = system.bead_residue[terms]
    first = (residue == 0).any(dim=1)
    last = (residue == system.n_residues - 1).any(dim=1)
    return int(first.sum()), int((~first & ~last).sum()), int(last.sum())


def _floyd_warshall(n, bonds):
    dist = np.full((n, n), np.inf)
    np.fill_diagonal(dist, 0)
    for a, b in bonds.tolist():
        dist[a, b] = dist[b, a] = 1
    for k in range(n):
        dist = np.minimum(dist, dist[:, k : k + 1] + dist[k : k + 1, :])
    return dist


def test_cln025_bonded_group_sizes():
    system = build_system("cln025")
    assert system.bonds.shape == (48, 2)
    assert _terminal_split(system, system.bonds) == (5, 38, 5)
    assert system.angles.shape == (65, 3)
    assert _terminal_split(system, system.angles) == (7, 51, 7)
    assert system.dihedrals.shape == (45, 4)
    kinds = dihedral_kinds(system)
    assert {k: kinds.count(k) for k in set(kinds)} == {
        "phi": 9,
        "psi": 9,
        "omega": 9,
        "gamma_1": 9,
        "gamma_2": 9,
    }


def test_cln025_nonbonded_pairs_match_mlcg():
    system = build_system("cln025")
    pairs = nonbonded_pairs(system)
    assert pairs.shape == (924, 2)
    assert pairs.dtype == torch.int64
    assert bool((pairs[:, 0] < pairs[:, 1]).all())
    dist = _floyd_warshall(system.n_beads, system.bonds)
    expected = [[i, j] for i, j in itertools.combinations(range(49), 2) if dist[i, j] >= 5]
    assert pairs.tolist() == expected


def test_cln025_ca_terms_match_mlcg_file():
    # docs/mlcg-format.md §9.1: bonds 9, angles 8, dihedrals 7, non_bonded 28.
    system = build_system("cln025", mapping="ca")
    assert system.bonds.tolist() == [[i, i + 1] for i in range(9)]
    assert system.angles.tolist() == [[i, i + 1, i + 2] for i in range(8)]
    assert system.dihedrals.tolist() == [[i, i + 1, i + 2, i + 3] for i in range(7)]
    assert set(dihedral_kinds(system)) == {"ca"}
    pairs = nonbonded_pairs(system)
    assert pairs.shape == (28, 2)
    assert bool((pairs[:, 1] - pairs[:, 0] >= 3).all())


@pytest.mark.parametrize("name", PROTEINS)
def test_terms_are_consistent(name):
    system = build_system(name)
    bonds = {tuple(b) for b in system.bonds.tolist()}
    assert len(bonds) == system.bonds.shape[0] == system.n_beads - 1  # a tree per chain

    def bonded(a, b):
        return (min(a, b), max(a, b)) in bonds

    angles = system.angles.tolist()
    assert len({(a, b, c) for a, b, c in angles}) == len(angles)
    assert all(bonded(a, b) and bonded(b, c) and a < c for a, b, c in angles)
    degree = np.bincount(system.bonds.flatten().numpy(), minlength=system.n_beads)
    assert len(angles) == int((degree * (degree - 1) // 2).sum())
    for quad, kind in zip(system.dihedrals.tolist(), dihedral_kinds(system), strict=True):
        if kind.startswith("gamma"):  # impropers: the first three hang on the last
            assert all(bonded(quad[3], x) for x in quad[:3])
        else:
            assert all(bonded(a, b) for a, b in itertools.pairwise(quad))


@pytest.mark.parametrize("name", PROTEINS)
def test_native_bond_lengths_are_physical(name):
    expected = {
        ("N", "CA"): 1.46,
        ("CA", "CB"): 1.53,
        ("CA", "C"): 1.52,
        ("C", "O"): 1.23,
        ("C", "N"): 1.33,
    }
    system = build_system(name)
    pos = system.native_positions
    lengths = (pos[system.bonds[:, 0]] - pos[system.bonds[:, 1]]).norm(dim=1)
    for (a, b), length in zip(system.bonds.tolist(), lengths.tolist(), strict=True):
        key = (system.bead_names[a], system.bead_names[b])
        assert abs(length - expected[key]) < 0.1, (name, a, b, key, length)


@pytest.mark.parametrize("name", PROTEINS)
def test_native_omega_is_trans(name):
    system = build_system(name)
    omega = system.dihedrals[[k == "omega" for k in dihedral_kinds(system)]]
    p = system.native_positions.double()
    b1 = p[omega[:, 1]] - p[omega[:, 0]]
    b2 = p[omega[:, 2]] - p[omega[:, 1]]
    b3 = p[omega[:, 3]] - p[omega[:, 2]]
    n1, n2 = torch.linalg.cross(b1, b2), torch.linalg.cross(b2, b3)
    cos = (n1 * n2).sum(1) / (n1.norm(dim=1) * n2.norm(dim=1))
    assert bool((cos < -0.8).all())  # |omega| > ~143 degrees


def test_graph_distances_match_floyd_warshall():
    system = build_system("2jof")
    dist = graph_distances(system.n_beads, system.bonds)
    assert dist.dtype == torch.int64 and dist.shape == (97, 97)
    np.testing.assert_array_equal(
        dist.numpy(), _floyd_warshall(system.n_beads, system.bonds).astype(np.int64)
    )


def test_graph_distances_disconnected():
    dist = graph_distances(4, torch.tensor([[0, 1], [2, 3]]))
    assert dist.tolist() == [
        [0, 1, UNREACHABLE, UNREACHABLE],
        [1, 0, UNREACHABLE, UNREACHABLE],
        [UNREACHABLE, UNREACHABLE, 0, 1],
        [UNREACHABLE, UNREACHABLE, 1, 0],
    ]


def test_exclusions_and_nonbonded_partition_pairs():
    system = build_system("cln025")
    excluded = {tuple(p) for p in bonded_exclusions(system).tolist()}
    kept = {tuple(p) for p in nonbonded_pairs(system, min_separation=4).tolist()}
    assert len(excluded) == 1176 - 992
    assert excluded.isdisjoint(kept) and len(excluded | kept) == 1176
    assert {tuple(b) for b in system.bonds.tolist()} <= excluded
    assert {(a, c) for a, _, c in system.angles.tolist()} <= excluded
    assert {(min(q[0], q[3]), max(q[0], q[3])) for q in system.dihedrals[:27].tolist()} <= excluded


def test_two_chains_have_no_bonded_terms_between_them(pdb):
    lines = pdb.peptide(["ALA", "GLY", "SER", "LEU"], chain="A")
    lines += pdb.peptide(["ALA", "VAL", "GLY"], chain="B", shift=(0.0, 12.0, 0.0))
    for mapping in ("five-bead", "ca"):
        system = build_system(pdb.write(lines), mapping=mapping)
        assert system.chain_index.tolist() == [0, 0, 0, 0, 1, 1, 1]
        chain_of_bead = system.chain_index[system.bead_residue]
        for terms in (system.bonds, system.angles, system.dihedrals):
            chains = chain_of_bead[terms]
            assert bool((chains == chains[:, :1]).all())
        n_a = int((chain_of_bead == 0).sum())
        assert system.bonds.shape[0] == system.n_beads - 2
        pairs = {tuple(p) for p in nonbonded_pairs(system).tolist()}
        cross = {(i, j) for i in range(n_a) for j in range(n_a, system.n_beads)}
        assert cross <= pairs
    assert system.dihedrals.tolist() == [[0, 1, 2, 3]]
    assert system.metadata["chain_ids"] == ("A", "B")
