"""Simulation: reproducibility, bitwise restarts, blow-up isolation, bad inputs,
checkpoint validation, observables."""

from __future__ import annotations

import os

import pytest
import torch
from helpers import interpreter_only, prior_potential, schnet_potential, system, tiny_system

from workbench.analysis import rmsd
from workbench.md import (
    CheckpointError,
    LangevinIntegrator,
    NeighborSettings,
    SafetyLimits,
    Simulation,
)
from workbench.md.simulation import checkpoint_positions, pooled_checkpoint_positions
from workbench.model import save_potential
from workbench.model.options import KernelOptions
from workbench.system import build_system
from workbench.units import KB


@pytest.fixture(scope="module")
def potential():
    """Small SchNet plus native priors (float32), shared: simulations do not modify it."""
    return schnet_potential(seed=0)


def make_sim(potential, replicas=3, seed=5, neighbors=None, **kwargs):
    kwargs.setdefault("integrator", LangevinIntegrator(0.004, 1.0, 300.0))
    return Simulation(tiny_system(), potential, replicas=replicas, seed=seed,
                      neighbors=neighbors or NeighborSettings(skin=0.5), **kwargs)


def state(sim):
    return (sim.positions, sim.velocities, sim.forces, sim.energy)


def assert_same_state(a, b):
    for x, y, name in zip(state(a), state(b), ("positions", "velocities", "forces", "energy"),
                          strict=True):
        assert torch.equal(x, y), name
    assert a.step_count == b.step_count


# -- reproducibility ------------------------------------------------------------------
def test_same_seed_is_bitwise_identical_and_other_seeds_differ(potential):
    a, b, c = (make_sim(potential, seed=s) for s in (11, 11, 12))
    for sim in (a, b, c):
        sim.step(12)
    assert_same_state(a, b)
    assert not torch.equal(a.positions, c.positions)
    assert not torch.equal(a.velocities, c.velocities)


@pytest.mark.parametrize(
    "neighbors",
    [{"skin": 0.5}, {"skin": 0.5, "capacity": 6000}, {"skin": 1.0, "exclude_bonded": True}],
    ids=["exact", "fixed-capacity", "exclude-bonded"],
)
def test_restart_from_checkpoint_is_bitwise(tmp_path, potential, neighbors):
    original = make_sim(potential, neighbors=NeighborSettings(**neighbors))
    original.step(7)
    path = original.save_checkpoint(tmp_path / "checkpoint.pt")
    builds_at_checkpoint = original.neighbor_list.builds
    original.step(9)
    assert original.neighbor_list.builds > builds_at_checkpoint, "a rebuild must happen after"

    # a different seed: the generator state must come from the checkpoint
    restarted = make_sim(potential, neighbors=NeighborSettings(**neighbors), seed=99)
    restarted.load_checkpoint(path)
    assert restarted.step_count == 7
    restarted.step(9)
    assert_same_state(original, restarted)
    assert torch.equal(original.frozen, restarted.frozen)
    assert original.neighbor_settings.capacity == neighbors.get("capacity")  # no overflow


def test_prior_only_restart_is_bitwise(tmp_path):
    pot = prior_potential()
    a = make_sim(pot, replicas=2)
    a.step(5)
    a.save_checkpoint(tmp_path / "c.pt")
    a.step(5)
    b = make_sim(pot, replicas=2, seed=1)
    b.load_checkpoint(tmp_path / "c.pt")
    b.step(5)
    assert_same_state(a, b)


def test_capacity_grows_on_overflow_without_changing_results(potential):
    exact = make_sim(potential, replicas=2)
    small = make_sim(potential, replicas=2, neighbors=NeighborSettings(skin=0.5, capacity=16))
    assert small.neighbor_list.capacity > 16
    assert small.neighbor_settings.capacity == small.neighbor_list.capacity
    for sim in (exact, small):
        sim.step(6)
    torch.testing.assert_close(small.positions, exact.positions, rtol=0, atol=1e-5)
    torch.testing.assert_close(small.energy, exact.energy, rtol=1e-5, atol=1e-4)


# -- blow-up isolation ----------------------------------------------------------------
def _overlap(pos):
    pos[1, 30] = pos[1, 10] + torch.tensor([0.05, 0.0, 0.0])  # two beads nearly on top


def _far_away(pos):
    pos[1, 5] += torch.tensor([400.0, 0.0, 0.0])  # one bead far outside the protein


@pytest.mark.parametrize("spoil", [_overlap, _far_away], ids=["overlap", "far-away"])
def test_bad_replica_is_frozen_and_the_others_go_on(potential, spoil):
    start = tiny_system().native_positions[None].repeat(3, 1, 1)
    spoil(start)
    sim = make_sim(potential, positions=start)
    good = make_sim(potential, positions=tiny_system().native_positions)  # same seed
    sim.step(1)
    assert sim.frozen_report() == [(1, 1)]
    frozen_pos, frozen_vel = sim.positions[1].clone(), sim.velocities[1].clone()
    assert torch.equal(frozen_pos, start[1])
    trail = [sim.positions.clone()]
    for _ in range(8):
        sim.step(1)
        trail.append(sim.positions.clone())
    good.step(9)
    assert sim.frozen_report() == [(1, 1)]  # reported once, at the step it happened
    assert torch.equal(sim.positions[1], frozen_pos) and torch.equal(sim.velocities[1], frozen_vel)
    for tensor in (sim.positions, sim.velocities):
        assert bool(torch.isfinite(tensor).all())
    # the others keep moving, as if the bad replica were not there (same seed, same noise)
    for r in (0, 2):
        assert float((trail[-1][r] - trail[0][r]).abs().max()) > 0.05
        torch.testing.assert_close(sim.positions[r], good.positions[r], rtol=0, atol=1e-4)
    metrics = sim.metrics()
    assert metrics["frozen"].tolist() == [False, True, False]
    assert bool(torch.isfinite(metrics["rmsd"][[0, 2]]).all())


def test_non_finite_forces_freeze_only_that_replica(monkeypatch):
    pot = prior_potential()
    sim = make_sim(pot, replicas=4)
    original = pot.energy_and_forces
    calls = {"n": 0}

    def flaky(pos, graph, options=None):
        energy, forces = original(pos, graph, options)
        calls["n"] += 1
        if calls["n"] == 3:  # the force call of step 3 (patched after the constructor's)
            forces = forces.clone()
            forces[2, 17, 1] = float("nan")
            energy = energy.clone()
            energy[2] = float("nan")
        return energy, forces

    monkeypatch.setattr(pot, "energy_and_forces", flaky)
    sim.step(2)
    before = sim.positions[2].clone()
    sim.step(5)
    assert sim.frozen_report() == [(2, 3)]
    assert torch.equal(sim.positions[2], before)
    assert bool(torch.isfinite(sim.positions).all() and torch.isfinite(sim.energy).all())
    assert bool(torch.isfinite(sim.forces).all())


def test_force_limit_freezes_replicas():
    sim = make_sim(prior_potential(), replicas=2, limits=SafetyLimits(max_force=1e-3))
    sim.step(2)
    assert sim.frozen_report() == [(0, 1), (1, 1)]


def test_frozen_state_survives_a_checkpoint(tmp_path, potential):
    start = tiny_system().native_positions[None].repeat(3, 1, 1)
    _overlap(start)
    sim = make_sim(potential, positions=start)
    sim.step(3)
    sim.save_checkpoint(tmp_path / "c.pt")
    other = make_sim(potential)
    other.load_checkpoint(tmp_path / "c.pt")
    assert other.frozen_report() == [(1, 1)]


# -- bad inputs -------------------------------------------------------------------------
@pytest.mark.parametrize("replicas", [0, -2])
def test_no_replicas(potential, replicas):
    with pytest.raises(ValueError, match=f"need at least one replica, got {replicas}"):
        make_sim(potential, replicas=replicas)


def test_negative_temperature(potential):
    with pytest.raises(ValueError, match=r"temperatures must be positive and finite.*-5"):
        make_sim(potential, integrator=LangevinIntegrator(temperature=-5.0))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_starting_coordinates(potential, bad):
    pos = tiny_system().native_positions.clone()
    pos[4, 2] = bad
    with pytest.raises(ValueError, match="starting positions contain NaN or infinite"):
        make_sim(potential, positions=pos)


@pytest.mark.parametrize("shape", [(48, 3), (49, 2), (2, 49, 3), (3, 49, 3, 1)])
def test_wrong_position_shape(potential, shape):
    with pytest.raises(ValueError, match=r"starting positions must have shape \(49, 3\) or "
                                         r"\(3, 49, 3\)"):
        make_sim(potential, positions=torch.zeros(shape))


def test_potential_for_another_system():
    other = prior_potential(system("2jof"))
    with pytest.raises(ValueError, match="potential is for .* beads, system cln025 has 49"):
        make_sim(other)


def test_negative_step_count(potential):
    with pytest.raises(ValueError, match="non-negative"):
        make_sim(potential).step(-1)


# -- checkpoints ----------------------------------------------------------------------
def test_checkpoint_for_another_system(tmp_path):
    other = Simulation(system("2jof"), prior_potential(system("2jof")), LangevinIntegrator(),
                       replicas=3)
    other.save_checkpoint(tmp_path / "c.pt")
    sim = make_sim(prior_potential())
    with pytest.raises(CheckpointError, match="is for system='2jof', this simulation has "
                                              "'cln025'"):
        sim.load_checkpoint(tmp_path / "c.pt")


def test_checkpoint_with_other_replica_count(tmp_path, potential):
    make_sim(potential, replicas=2).save_checkpoint(tmp_path / "c.pt")
    sim = make_sim(potential, replicas=3)
    before = sim.positions.clone()
    with pytest.raises(CheckpointError, match="replicas=2, this simulation has 3"):
        sim.load_checkpoint(tmp_path / "c.pt")
    assert torch.equal(sim.positions, before) and sim.step_count == 0


@pytest.mark.parametrize("kind", ["garbage", "empty", "model", "other-dict"])
def test_unreadable_checkpoint(tmp_path, potential, kind):
    path = tmp_path / "c.pt"
    if kind == "garbage":
        path.write_bytes(os.urandom(300))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "model":
        save_potential(potential, path)
    else:
        torch.save({"positions": torch.zeros(3)}, path)
    sim = make_sim(potential)
    with pytest.raises(CheckpointError, match="c.pt"):
        sim.load_checkpoint(path)


def test_checkpoint_positions_are_the_live_replicas_as_starting_structures(tmp_path):
    sim = make_sim(prior_potential(), replicas=3)
    sim.step(5)
    sim.frozen[1] = True
    sim.save_checkpoint(tmp_path / "checkpoint.pt")
    for path in (tmp_path, tmp_path / "checkpoint.pt"):  # a run folder or its file
        starts = checkpoint_positions(path, tiny_system())
        assert torch.equal(starts, sim.positions[[0, 2]])
    with pytest.raises(CheckpointError, match=r"of cln025 \(49 beads\), not of 2jof"):
        checkpoint_positions(tmp_path, system("2jof"))
    sim.frozen[:] = True
    sim.save_checkpoint(tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="every replica .* is frozen"):
        checkpoint_positions(tmp_path, tiny_system())


def test_pooled_checkpoint_positions_take_each_run_in_turn(tmp_path):
    runs = []
    for k, replicas in enumerate((3, 1)):
        sim = make_sim(prior_potential(), replicas=replicas)
        sim.positions += 10.0 * k  # tell the runs apart
        sim.save_checkpoint(tmp_path / f"run{k}.pt")
        runs.append(sim.positions.clone())
    starts = pooled_checkpoint_positions([tmp_path / "run0.pt", tmp_path / "run1.pt"],
                                         tiny_system())
    # run 0's first, run 1's only one, then the rest of run 0's: two replicas cycling
    # through these start from both runs
    assert torch.equal(starts, torch.stack([runs[0][0], runs[1][0], runs[0][1], runs[0][2]]))
    with pytest.raises(ValueError, match="at least one run"):
        pooled_checkpoint_positions([], tiny_system())
    with pytest.raises(FileNotFoundError, match="absent.pt"):
        pooled_checkpoint_positions([tmp_path / "run0.pt", tmp_path / "absent.pt"],
                                    tiny_system())


def test_missing_checkpoint(tmp_path, potential):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        make_sim(potential).load_checkpoint(tmp_path / "absent.pt")


def test_failed_checkpoint_write_keeps_the_old_one(tmp_path, potential, monkeypatch):
    sim = make_sim(potential)
    path = sim.save_checkpoint(tmp_path / "c.pt")
    before = path.read_bytes()
    sim.step(2)

    def broken(obj, f, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        sim.save_checkpoint(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


# -- observables ----------------------------------------------------------------------
def test_metrics_at_the_native_structure(potential):
    sim = make_sim(potential, replicas=2)
    metrics = sim.metrics()
    assert set(metrics) == {"rmsd", "q", "potential_energy", "kinetic_energy", "temperature",
                            "frozen"}
    for value in metrics.values():
        assert value.shape == (2,)
    assert float(metrics["rmsd"].max()) < 1e-3
    assert float(metrics["q"].min()) > 0.9
    n = tiny_system().n_beads
    torch.testing.assert_close(metrics["temperature"],
                               2 * metrics["kinetic_energy"] / (3 * n * KB))
    assert sim.time_ps == 0.0
    sim.step(5)
    assert sim.time_ps == pytest.approx(0.02)
    assert float(sim.metrics()["rmsd"].min()) > 0.0


def test_per_replica_initial_temperatures(potential):
    temps = [100.0, 1000.0] * 16
    sim = make_sim(potential, replicas=32, integrator=LangevinIntegrator(temperature=temps))
    t = sim.kinetic_temperature()
    # 147 degrees of freedom: ±12 % per replica; 16 replicas per group ⇒ ±3 %
    assert float(t[0::2].mean()) == pytest.approx(100.0, rel=0.12)
    assert float(t[1::2].mean()) == pytest.approx(1000.0, rel=0.12)


# -- a system of several copies, searched by the cell list -----------------------------
@pytest.fixture(scope="module")
def copies():
    return system("cln025*3")


def copies_sim(copies, cell_list_above=0, **kwargs):
    """Two replicas of three CLN025 copies with a small SchNet (6 Å cutoff)."""
    return Simulation(copies, schnet_potential(copies), LangevinIntegrator(0.004, 1.0, 300.0),
                      replicas=2, seed=3, neighbors=NeighborSettings(
                          skin=0.5, cell_list_above=cell_list_above), **kwargs)


def test_copies_run_the_same_with_the_cell_list_as_with_dense_search(copies):
    cells, dense = copies_sim(copies), copies_sim(copies, cell_list_above=10**6)
    assert not cells.neighbor_list.dense and dense.neighbor_list.dense
    for sim in (cells, dense):
        sim.step(4)
    assert_same_state(cells, dense)


@interpreter_only
def test_copies_on_a_fused_path_with_the_cell_list():
    copies = build_system("cln025*3", mapping="ca")  # 30 beads: the interpreter is slow
    fused = copies_sim(copies, options=KernelOptions(csr_aggregation=True, fused_integrator=True))
    reference = copies_sim(copies)
    assert fused.applied_options().csr_aggregation and fused.fuses_steps()
    energy, forces = fused.potential.energy_and_forces(fused.positions, fused.graph,
                                                       fused.options)
    assert torch.allclose(forces, reference.forces, atol=1e-4)
    assert torch.allclose(energy, reference.energy, rtol=1e-5)
    fused.step(1)
    assert not fused.frozen.any()


def test_copy_metrics_are_per_copy(copies):
    sim = copies_sim(copies)
    sim.step(2)
    before = sim.metrics()
    n = copies.n_beads // 3
    ca = sim.positions[:, copies.ca_index].reshape(2, 3, -1, 3)
    native = copies.native_positions[copies.ca_index[: ca.shape[2]]]
    assert torch.allclose(before["rmsd"], rmsd(ca, native).mean(1))
    sim.positions[:, n:2 * n] += torch.tensor([40.0, -25.0, 10.0])  # one copy drifts away
    after = sim.metrics()
    assert torch.allclose(after["rmsd"], before["rmsd"]) and torch.allclose(after["q"], before["q"])


def test_large_systems_refuse_the_pair_search(copies):
    sim = copies_sim(copies, options=KernelOptions(fused_pair_search=True))
    assert not sim.searches_pairs() and not sim.applied_options().fused_pair_search
