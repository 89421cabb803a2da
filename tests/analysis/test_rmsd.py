import mdtraj
import numpy as np
import pytest
import torch

from workbench.analysis import rmsd


def _ca_trajectory(xyz_nm: np.ndarray) -> mdtraj.Trajectory:
    topology = mdtraj.Topology()
    chain = topology.add_chain()
    for _ in range(xyz_nm.shape[1]):
        residue = topology.add_residue("ALA", chain)
        topology.add_atom("CA", mdtraj.element.carbon, residue)
    return mdtraj.Trajectory(xyz_nm.astype(np.float32), topology)


def test_matches_mdtraj():
    rng = np.random.default_rng(0)
    xyz_nm = rng.standard_normal((1, 25, 3)) * 0.8
    xyz_nm = xyz_nm + rng.standard_normal((10, 25, 3)) * 0.3
    expected = mdtraj.rmsd(_ca_trajectory(xyz_nm), _ca_trajectory(xyz_nm), frame=0) * 10.0
    pos = torch.from_numpy(xyz_nm.astype(np.float32) * 10.0)
    got = rmsd(pos, pos[0])
    assert got.dtype == torch.float32 and got.shape == (10,)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=2e-3)


def test_matches_numpy_svd(numpy_rmsd):
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((30, 3)) * 7.0
    pos = ref + rng.standard_normal((8, 30, 3)) * np.linspace(0.1, 5.0, 8)[:, None, None]
    pos[3] = -pos[3]  # a mirror image among them
    got = rmsd(torch.from_numpy(pos), torch.from_numpy(ref)).numpy()
    np.testing.assert_allclose(got, [numpy_rmsd(p, ref) for p in pos], rtol=1e-12, atol=1e-12)


def test_invariant_to_rotation_and_translation(rotation):
    rng = np.random.default_rng(2)
    ref = torch.from_numpy(rng.standard_normal((18, 3)) * 6.0)
    pos = ref + torch.from_numpy(rng.standard_normal((5, 18, 3)))
    base = rmsd(pos, ref)
    moved = torch.stack(
        [p @ torch.from_numpy(rotation(rng)) + torch.from_numpy(rng.normal(0, 20, 3)) for p in pos]
    )
    ref_moved = ref @ torch.from_numpy(rotation(rng)) - 4.0
    torch.testing.assert_close(rmsd(moved, ref), base, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rmsd(pos, ref_moved), base, rtol=1e-12, atol=1e-12)


def test_zero_for_rigidly_moved_copy_and_positive_for_mirror(rotation):
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((12, 3)) * 5.0
    copies = np.stack([ref @ rotation(rng) + 3.0, ref * np.array([-1.0, 1.0, 1.0])])
    got = rmsd(torch.from_numpy(copies), torch.from_numpy(ref)).numpy()
    assert got[0] == pytest.approx(0.0, abs=1e-9)
    assert got[1] > 0.5


def test_batched_reference_and_float32_accuracy(numpy_rmsd):
    rng = np.random.default_rng(4)
    pos = rng.standard_normal((4, 40, 3)) * 10.0
    refs = pos + rng.standard_normal((4, 40, 3)) * 0.01
    got = rmsd(torch.from_numpy(pos).float(), torch.from_numpy(refs).float()).double().numpy()
    expected = [numpy_rmsd(pos[r].astype(np.float32), refs[r].astype(np.float32)) for r in range(4)]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
