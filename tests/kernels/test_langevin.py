"""The two Langevin kernels against their PyTorch references: the BAOAB drift, and the last
kick with the per-replica blow-up check (non-finite values, a force above the limit, a
bead beyond the extent, a replica frozen before), over several bead tiles."""

import pytest
import torch

from kernels.langevin import (
    langevin_drift,
    langevin_drift_reference,
    langevin_finish,
    langevin_finish_reference,
)

H, C1, C2 = 0.004, 0.996, 0.0894


def state(replicas=6, n=300, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    pos = 5.0 * torch.randn(replicas, n, 3, generator=g)
    vel = torch.randn(replicas, n, 3, generator=g)
    forces = 10.0 * torch.randn(replicas, n, 3, generator=g)
    inv_mass = 418.4 / (50.0 + 100.0 * torch.rand(n, 1, generator=g))
    kt = 0.3 + 0.6 * torch.rand(replicas, generator=g)
    noise = torch.randn(replicas, n, 3, generator=g)
    return [t.to(device) for t in (pos, vel, forces, inv_mass, kt, noise)]


def test_drift_matches_the_reference(device):
    args = state(device=device)
    got = langevin_drift(*args, H, C1, C2)
    ref = langevin_drift_reference(*args, H, C1, C2)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [300, 7], ids=["three-tiles", "one-tile"])
def test_finish_freezes_exactly_the_failing_replicas(device, n):
    pos, vel, forces, inv_mass, kt, noise = state(n=n, device=device)
    new_pos, new_vel = langevin_drift(pos, vel, forces, inv_mass, kt, noise, H, C1, C2)
    g = torch.Generator().manual_seed(1)
    new_forces = (10.0 * torch.randn(pos.shape, generator=g)).to(device)
    new_forces[1, n - 1, 2] = float("nan")  # non-finite, in the last tile
    new_forces[2, 3, 0] = -2.0e4  # beyond max_force
    new_pos[3, n // 2] += 300.0  # beyond max_extent
    frozen = torch.tensor([False, False, False, False, True, False], device=device)
    old = (pos, vel, forces, torch.arange(6.0, device=device), frozen,
           torch.tensor([-1, -1, -1, -1, 7, -1], device=device))
    energy = torch.full((6,), -3.0, device=device)
    args = (old, new_pos, new_vel, new_forces, energy, inv_mass, H, 1.0e4, 100.0,
            torch.tensor(12, device=device))
    got, ref = langevin_finish(*args), langevin_finish_reference(*args)
    assert got[4].tolist() == [False, True, True, True, True, False]
    assert got[5].tolist() == [-1, 12, 12, 12, 7, -1]
    assert got[3].tolist() == [-3.0, 1.0, 2.0, 3.0, 4.0, -3.0]
    for a, b in zip(got, ref, strict=True):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert torch.equal(got[0][1:5], pos[1:5]) and torch.equal(got[2][1:5], forces[1:5])
    # forces summed by autograd can come out transposed in memory: same values out
    transposed = new_forces.transpose(0, 1).contiguous().transpose(0, 1)
    assert not transposed.is_contiguous()
    again = langevin_finish(old, new_pos, new_vel, transposed, *args[4:])
    for a, b in zip(again, got, strict=True):
        assert torch.equal(a, b)
    # in place: the same values, written over the old state
    buffers = tuple(t.clone() for t in old)
    written = langevin_finish(buffers, *args[1:], in_place=True)
    for a, b, buffer in zip(written, got, buffers, strict=True):
        assert a is buffer and torch.equal(a, b)
