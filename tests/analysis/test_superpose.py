import mdtraj
import numpy as np
import pytest
import torch

from workbench.analysis import kabsch_rotation, rmsd, rotation_from_covariance, superpose


def _structures(rng, replicas=5, n=12):
    ref = rng.standard_normal((n, 3)) * 6.0
    mobile = ref + rng.standard_normal((replicas, n, 3)) * 1.5
    return torch.from_numpy(mobile), torch.from_numpy(ref)


def test_recovers_rigid_motion_exactly(rotation):
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((20, 3)) * 8.0
    mobile = np.stack([ref @ rotation(rng) + rng.standard_normal(3) * 30.0 for _ in range(4)])
    moved = superpose(torch.from_numpy(mobile), torch.from_numpy(ref))
    np.testing.assert_allclose(moved.numpy(), np.broadcast_to(ref, mobile.shape), atol=1e-10)


def test_matches_numpy_svd(numpy_superpose):
    rng = np.random.default_rng(1)
    mobile, ref = _structures(rng)
    moved = superpose(mobile, ref).numpy()
    for r in range(mobile.shape[0]):
        np.testing.assert_allclose(
            moved[r], numpy_superpose(mobile[r].numpy(), ref.numpy()), atol=1e-10
        )


def test_batched_reference(numpy_superpose):
    rng = np.random.default_rng(2)
    mobile, _ = _structures(rng, replicas=3)
    refs = torch.from_numpy(rng.standard_normal(mobile.shape) * 5.0)
    moved = superpose(mobile, refs).numpy()
    for r in range(3):
        np.testing.assert_allclose(
            moved[r], numpy_superpose(mobile[r].numpy(), refs[r].numpy()), atol=1e-10
        )


def test_rotation_is_proper_and_consistent_with_superpose():
    rng = np.random.default_rng(3)
    mobile, ref = _structures(rng, replicas=6)
    mobile[::2] = -mobile[::2]  # mirror images: the unconstrained optimum is a reflection
    rot = kabsch_rotation(mobile, ref)
    assert rot.shape == (6, 3, 3)
    eye = torch.eye(3, dtype=torch.float64).expand(6, 3, 3)
    torch.testing.assert_close(rot.transpose(1, 2) @ rot, eye, atol=1e-12, rtol=0)
    torch.testing.assert_close(torch.linalg.det(rot), torch.ones(6, dtype=torch.float64))
    expected = (mobile - mobile.mean(1, keepdim=True)) @ rot + ref.mean(0)
    torch.testing.assert_close(superpose(mobile, ref), expected, atol=1e-10, rtol=0)


def test_mirror_image_is_not_superposed_by_reflection(numpy_superpose):
    rng = np.random.default_rng(4)
    ref = rng.standard_normal((15, 3)) * 5.0
    mirror = ref * np.array([1.0, 1.0, -1.0])
    moved = superpose(torch.from_numpy(mirror)[None], torch.from_numpy(ref))[0].numpy()
    # A reflection would match exactly; a proper rotation cannot for a chiral cloud.
    assert np.sqrt(((moved - ref) ** 2).sum(1).mean()) > 0.5
    np.testing.assert_allclose(moved, numpy_superpose(mirror, ref), atol=1e-10)


def test_weights_select_fit_points_and_move_all(numpy_superpose):
    rng = np.random.default_rng(5)
    mobile, ref = _structures(rng, replicas=4, n=16)
    mask = torch.from_numpy(rng.random((4, 16)) < 0.6)
    mask[:, :3] = True
    moved = superpose(mobile, ref, weights=mask).numpy()
    for r in range(4):
        sel = mask[r].numpy()
        np.testing.assert_allclose(
            moved[r][sel], numpy_superpose(mobile[r].numpy()[sel], ref.numpy()[sel]), atol=1e-10
        )
    # every point, fitted or not, moved by the same rigid motion
    torch.testing.assert_close(
        torch.cdist(torch.from_numpy(moved), torch.from_numpy(moved)), torch.cdist(mobile, mobile)
    )


def test_uniform_weights_equal_unweighted():
    rng = np.random.default_rng(6)
    mobile, ref = _structures(rng)
    weights = torch.full((mobile.shape[1],), 2.5, dtype=torch.float64)
    torch.testing.assert_close(superpose(mobile, ref, weights), superpose(mobile, ref))


def test_float32_in_float32_out_and_leading_axes():
    rng = np.random.default_rng(7)
    mobile, ref = _structures(rng, replicas=6)
    moved64 = superpose(mobile, ref)
    moved32 = superpose(mobile.float().reshape(2, 3, -1, 3), ref.float())
    assert moved32.dtype == torch.float32 and moved32.shape == (2, 3, 12, 3)
    assert kabsch_rotation(mobile.float(), ref.float()).dtype == torch.float32
    torch.testing.assert_close(moved32.reshape(moved64.shape).double(), moved64, atol=1e-4, rtol=0)


def test_rotation_from_covariance_identity_and_flip():
    eye = torch.eye(3, dtype=torch.float64)
    torch.testing.assert_close(
        rotation_from_covariance(torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64))),
        eye,
    )
    # covariance of a mirror in z: best proper rotation keeps the identity
    flipped = torch.diag(torch.tensor([3.0, 2.0, -1.0], dtype=torch.float64))
    torch.testing.assert_close(rotation_from_covariance(flipped), eye)


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


def test_rmsd_matches_numpy_svd(numpy_rmsd):
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
