import numpy as np
import torch

from workbench.analysis import kabsch_rotation, rotation_from_covariance, superpose


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
