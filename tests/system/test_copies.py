"""Systems of several copies of a protein: layout, topology offsets, gaps, pair lists."""

from __future__ import annotations

import pytest
import torch
from helpers import system

from workbench.system import build_system
from workbench.system.copies import COPY_GAP, first_copy, parse_copies, replicate_system
from workbench.system.topology import bonded_exclusions, nonbonded_pairs

COPIES = 5


@pytest.fixture(scope="module")
def copies():
    return build_system(f"cln025*{COPIES}")


def test_copies_repeat_the_protein_with_offset_indices(copies):
    one = system("cln025")
    n, m = one.n_beads, one.n_residues
    assert copies.name == "cln025*5" and copies.copies == COPIES
    assert copies.n_beads == COPIES * n and copies.n_residues == COPIES * m
    assert torch.equal(copies.bead_types, one.bead_types.repeat(COPIES))
    assert copies.metadata["chain_ids"] == one.metadata["chain_ids"] * COPIES
    assert torch.equal(copies.masses, one.masses.repeat(COPIES))
    chains = int(one.chain_index.max()) + 1
    for k in range(COPIES):
        beads, residues = slice(k * n, (k + 1) * n), slice(k * m, (k + 1) * m)
        assert torch.equal(copies.bead_residue[beads], one.bead_residue + k * m)
        assert torch.equal(copies.ca_index[residues], one.ca_index + k * n)
        assert torch.equal(copies.chain_index[residues], one.chain_index + k * chains)
        for name, stride in (("bonds", n), ("angles", n), ("dihedrals", n),
                             ("native_contacts", m)):
            rows = getattr(one, name)
            block = getattr(copies, name)[k * len(rows):(k + 1) * len(rows)]
            assert torch.equal(block, rows + k * stride), name
        # a rigid translate of the native structure
        shift = copies.native_positions[beads] - one.native_positions
        assert torch.allclose(shift, shift[:1].expand_as(shift), atol=1e-4)


def test_no_term_joins_two_copies_and_copies_start_apart(copies):
    n = copies.n_beads // COPIES
    copy_of = torch.arange(copies.n_beads) // n
    for rows in (copies.bonds, copies.angles, copies.dihedrals, bonded_exclusions(copies),
                 nonbonded_pairs(copies)):
        assert bool((copy_of[rows] == copy_of[rows[:, :1]]).all())
    pos = copies.native_positions
    apart = copy_of[:, None] != copy_of[None, :]
    assert float(torch.cdist(pos, pos)[apart].min()) >= COPY_GAP - 1e-3
    assert len(nonbonded_pairs(copies)) == COPIES * len(nonbonded_pairs(system("cln025")))


def test_first_copy_is_the_protein_it_was_made_from(copies):
    one, back = system("cln025"), first_copy(copies)
    assert back.name == one.name and back.metadata == one.metadata
    for name in ("bead_types", "bonds", "dihedrals", "native_positions", "native_contacts"):
        assert torch.equal(getattr(back, name), getattr(one, name)), name


@pytest.mark.parametrize("spec", ["cln025*0", "cln025*x", "*3", "cln025*-2"])
def test_bad_copy_counts_are_refused(spec):
    with pytest.raises(ValueError, match="write NAME\\*N with N a positive number of copies"):
        parse_copies(spec)


def test_replicate_refuses_bad_arguments(copies):
    one = system("cln025")
    assert parse_copies("1enh") == ("1enh", 1) and replicate_system(one, 1) is one
    with pytest.raises(ValueError, match="already a system of 5 copies"):
        replicate_system(copies, 2)
    with pytest.raises(ValueError, match="copies must be at least 1"):
        replicate_system(one, 0)
    with pytest.raises(ValueError, match="non-negative distance"):
        replicate_system(one, 2, gap=-1.0)
