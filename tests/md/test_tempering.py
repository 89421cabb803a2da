"""Parallel tempering: the ladder, the exchange rule against a direct evaluation, parity
alternation, velocity rescaling, frozen replicas, reproducibility, bitwise restarts, the
CSV log, and Boltzmann sampling at every level of a harmonic system with exchanges on."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from helpers import block_standard_error, bonds_only_potential, prior_potential, tiny_system

import workbench.md.tempering as tempering
from workbench.md import (
    CheckpointError,
    LangevinIntegrator,
    Simulation,
    VelocityVerletIntegrator,
)
from workbench.md.tempering import (
    ReplicaExchange,
    attempt_exchanges,
    geometric_ladder,
    pair_labels,
)
from workbench.units import KB


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Run on one intra-op thread: these tensors are tiny, and on a busy 2-core machine
    torch's thread pool made the sampling runs 20 times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_sim(replicas=4, seed=3, potential=None, temperature=300.0, **kwargs):
    sys = tiny_system()
    integrator = LangevinIntegrator(0.002, 5.0, temperature)
    return Simulation(
        sys, potential or prior_potential(sys), integrator, replicas=replicas, seed=seed, **kwargs
    )


# -- the ladder -------------------------------------------------------------------------
def test_geometric_ladder_has_a_constant_ratio_and_exact_ends():
    ladder = geometric_ladder(300.0, 600.0, 4)
    assert ladder.dtype == torch.float64 and ladder.shape == (4,)
    assert ladder[0].item() == 300.0 and ladder[-1].item() == 600.0
    torch.testing.assert_close(ladder[1:] / ladder[:-1], torch.full((3,), 2 ** (1 / 3)).double())
    assert pair_labels(ladder) == ["300–378 K", "378–476 K", "476–600 K"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((300.0, 600.0, 1), "needs 2 to"),
        ((300.0, 600.0, 2.5), "needs 2 to"),
        ((0.0, 600.0, 3), "positive and finite"),
        ((300.0, float("inf"), 3), "positive and finite"),
        ((600.0, 300.0, 3), "highest temperature must exceed the lowest"),
        ((300.0, 300.0, 3), "highest temperature must exceed the lowest"),
    ],
)
def test_geometric_ladder_refuses_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        geometric_ladder(*args)


# -- the exchange rule ------------------------------------------------------------------
def direct_exchanges(energies, levels, betas, parity, uniform, frozen):
    """Reference: the Metropolis rule pair by pair with Python loops."""
    groups, count = energies.shape
    new = levels.clone()
    accepted = torch.zeros((groups, count - 1), dtype=torch.bool)
    for g in range(groups):
        at_level = {int(levels[g, j]): j for j in range(count)}
        for k in range(parity, count - 1, 2):
            i, j = at_level[k], at_level[k + 1]
            if frozen[g, i] or frozen[g, j]:
                continue
            delta = (float(betas[k]) - float(betas[k + 1])) * float(energies[g, i] - energies[g, j])
            if float(uniform[g, k]) < min(1.0, math.exp(delta)):
                new[g, i], new[g, j] = k + 1, k
                accepted[g, k] = True
    return new, accepted


@pytest.mark.parametrize("parity", [0, 1])
def test_exchanges_match_a_direct_evaluation(parity):
    groups, count = 60, 5
    gen = torch.Generator().manual_seed(1)
    betas = 1.0 / (KB * geometric_ladder(300.0, 500.0, count))
    levels = torch.stack([torch.randperm(count, generator=gen) for _ in range(groups)])
    # energies a few k_B T apart, so that acceptance probabilities spread over (0, 1]
    energies = 40.0 + 2.0 * torch.randn((groups, count), generator=gen, dtype=torch.float64)
    frozen = torch.rand((groups, count), generator=gen) < 0.1
    new, accepted, attempted = attempt_exchanges(
        energies, levels, betas, parity, torch.Generator().manual_seed(9), frozen
    )
    uniform = torch.rand(
        (groups, count - 1), generator=torch.Generator().manual_seed(9), dtype=torch.float64
    )
    expected_levels, expected_accepted = direct_exchanges(
        energies, levels, betas, parity, uniform, frozen
    )
    assert torch.equal(new, expected_levels)
    assert torch.equal(accepted, expected_accepted)
    assert 0 < int(accepted.sum()) < int(attempted.sum())  # a real mix of outcomes
    for row in new:  # every group still holds each level once
        assert sorted(row.tolist()) == list(range(count))


def test_acceptance_frequency_is_the_metropolis_probability():
    groups = 20000
    betas = 1.0 / (KB * torch.tensor([300.0, 330.0], dtype=torch.float64))
    # the colder replica 2 kcal/mol lower: p = exp(-(β0 - β1) · 2)
    energies = torch.tensor([[0.0, 2.0]]).expand(groups, 2)
    levels = torch.tensor([[0, 1]]).expand(groups, 2)
    _, accepted, attempted = attempt_exchanges(
        energies, levels, betas, 0, torch.Generator().manual_seed(4)
    )
    p = math.exp(-(float(betas[0]) - float(betas[1])) * 2.0)
    assert bool(attempted.all())
    assert abs(float(accepted.double().mean()) - p) < 4 * math.sqrt(p * (1 - p) / groups)
    # the reverse order is always accepted
    _, accepted, _ = attempt_exchanges(energies.flip(1), levels, betas, 0, None)
    assert bool(accepted.all())


def test_parity_picks_even_then_odd_pairs():
    levels = torch.arange(5).expand(3, 5)
    energies = torch.zeros(3, 5)
    betas = torch.linspace(2.0, 1.0, 5, dtype=torch.float64)
    _, _, even = attempt_exchanges(energies, levels, betas, 0, None)
    _, _, odd = attempt_exchanges(energies, levels, betas, 1, None)
    assert even[0].tolist() == [True, False, True, False]
    assert odd[0].tolist() == [False, True, False, True]
    with pytest.raises(ValueError, match="parity must be 0 or 1"):
        attempt_exchanges(energies, levels, betas, 2, None)
    with pytest.raises(ValueError, match="shape"):
        attempt_exchanges(energies.flatten(), levels.flatten(), betas, 0, None)


def test_the_driver_alternates_parity_round_by_round():
    sim = make_sim(replicas=10)
    rex = ReplicaExchange(sim, geometric_ladder(300.0, 400.0, 5), exchange_every=2)
    rex.run(2)
    assert rex.rounds == 1 and rex.attempts.tolist() == [2, 0, 2, 0]
    rex.run(2)
    assert rex.rounds == 2 and rex.attempts.tolist() == [2, 2, 2, 2]
    rex.run(1)
    assert rex.rounds == 2  # the next round is due at step 6


# -- the driver -------------------------------------------------------------------------
def test_construction_sets_the_ladder_and_rescales_velocities():
    sim = make_sim(replicas=6, temperature=300.0)
    before = sim.velocities.clone()
    rex = ReplicaExchange(sim, [300.0, 600.0, 1200.0])
    expected = torch.tensor([300.0, 600.0, 1200.0] * 2, dtype=torch.float64)
    assert torch.equal(rex.replica_temperatures(), expected)
    assert torch.equal(sim.integrator.temperature, expected)
    scale = torch.tensor([1.0, math.sqrt(2.0), 2.0] * 2)[:, None, None]
    torch.testing.assert_close(sim.velocities, before * scale)
    assert torch.equal(sim.velocities[0], before[0])
    assert rex.groups.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert torch.isnan(rex.acceptance_rates()).all()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ReplicaExchange(make_sim(replicas=5), [300.0, 400.0]), "not a multiple of"),
        (lambda: ReplicaExchange(make_sim(), [400.0, 300.0]), "must increase"),
        (lambda: ReplicaExchange(make_sim(), [300.0]), "needs 2 to"),
        (lambda: ReplicaExchange(make_sim(), [300.0, 400.0], exchange_every=0), "at least 1"),
    ],
)
def test_bad_settings_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_thermostat_is_required():
    sys = tiny_system()
    sim = Simulation(sys, prior_potential(sys), VelocityVerletIntegrator(0.002), replicas=2)
    with pytest.raises(TypeError, match="needs a LangevinIntegrator"):
        ReplicaExchange(sim, [300.0, 400.0])


def test_swapped_replicas_change_temperature_and_rescale_velocities():
    sim = make_sim(replicas=6)
    rex = ReplicaExchange(sim, [300.0, 400.0])
    state = [t.clone() for t in (sim.positions, sim.velocities, sim.forces)]
    # group 0: the cold replica has the higher energy, always accepted; group 1: the cold
    # one is 1000 kcal/mol lower, never accepted; group 2: equal energies, always accepted
    sim.energy = torch.tensor([50.0, 0.0, 0.0, 1000.0, 7.0, 7.0])
    accepted = rex.exchange()
    assert accepted.flatten().tolist() == [True, False, True]
    assert rex.level_of_replica.tolist() == [1, 0, 0, 1, 1, 0]
    new_t = torch.tensor([400.0, 300.0, 300.0, 400.0, 400.0, 300.0], dtype=torch.float64)
    assert torch.equal(sim.integrator.temperature, new_t)
    scale = torch.tensor(
        [math.sqrt(4 / 3), math.sqrt(3 / 4), 1.0, 1.0, math.sqrt(4 / 3), math.sqrt(3 / 4)]
    )
    torch.testing.assert_close(sim.velocities, state[1] * scale[:, None, None])
    assert torch.equal(sim.velocities[2:4], state[1][2:4])  # not swapped: bit for bit
    assert torch.equal(sim.positions, state[0]) and torch.equal(sim.forces, state[2])
    assert rex.accepts.tolist() == [2] and rex.attempts.tolist() == [3]
    assert rex.acceptance_rates().tolist() == [2 / 3]


def test_frozen_replicas_never_exchange():
    sim = make_sim(replicas=6)
    rex = ReplicaExchange(sim, [300.0, 350.0, 400.0])
    sim.energy = torch.tensor([90.0, 60.0, 30.0] * 2)  # every attempted swap is accepted
    sim.frozen = torch.tensor([False, True, False, False, False, False])
    frozen_velocity = sim.velocities[1].clone()
    first = rex.exchange()  # pair 0-1: group 0 holds the frozen replica
    assert first.tolist() == [[False, False], [True, False]]
    sim.energy = torch.tensor([90.0, 60.0, 30.0, 60.0, 90.0, 30.0])
    second = rex.exchange()  # pair 1-2: again blocked in group 0
    assert second.tolist() == [[False, False], [False, True]]
    assert rex.level_of_replica.tolist() == [0, 1, 2, 2, 0, 1]
    assert rex.attempts.tolist() == [1, 1]
    assert torch.equal(sim.velocities[1], frozen_velocity)
    assert float(sim.integrator.temperature[1]) == 350.0


def test_exchanges_follow_the_step_count_not_the_calls():
    a, b = make_sim(replicas=4, seed=5), make_sim(replicas=4, seed=5)
    rex_a = ReplicaExchange(a, [300.0, 330.0], exchange_every=4)
    rex_b = ReplicaExchange(b, [300.0, 330.0], exchange_every=4)
    rex_a.run(24)
    for chunk in (3, 5, 1, 7, 8):
        rex_b.run(chunk)
    assert rex_a.rounds == rex_b.rounds == 6
    assert torch.equal(rex_a.level_history()[1], rex_b.level_history()[1])
    assert torch.equal(a.positions, b.positions) and torch.equal(a.velocities, b.velocities)


def test_same_seed_reproduces_the_run_and_another_seed_does_not():
    def run(seed):
        sim = make_sim(replicas=8, seed=seed)
        rex = ReplicaExchange(sim, geometric_ladder(300.0, 400.0, 4), exchange_every=2)
        rex.run(40)
        return sim, rex

    (a, rex_a), (b, rex_b), (_, rex_c) = run(1), run(1), run(2)
    steps, history = rex_a.level_history()
    assert steps.tolist() == list(range(0, 41, 2)) and history.shape == (21, 8)
    assert torch.equal(history, rex_b.level_history()[1])
    assert torch.equal(a.positions, b.positions) and torch.equal(a.velocities, b.velocities)
    assert int(rex_a.accepts.sum()) > 0, "no swap happened: the test would prove nothing"
    assert not torch.equal(history, rex_c.level_history()[1])


def test_restart_from_checkpoint_is_bitwise(tmp_path):
    ladder = geometric_ladder(300.0, 400.0, 3)
    sim = make_sim(replicas=6, seed=7)
    rex = ReplicaExchange(sim, ladder, exchange_every=3)
    rex.run(15)
    sim.save_checkpoint(tmp_path / "checkpoint.pt")
    rex.save(tmp_path / "tempering.pt")
    rex.run(30)

    other = make_sim(replicas=6, seed=99)  # a different seed: all state comes from the files
    resumed = ReplicaExchange(other, ladder, exchange_every=3)
    other.load_checkpoint(tmp_path / "checkpoint.pt")
    resumed.load(tmp_path / "tempering.pt")
    assert resumed.rounds == 5
    resumed.run(30)
    assert torch.equal(sim.positions, other.positions)
    assert torch.equal(sim.velocities, other.velocities)
    assert torch.equal(rex.level_of_replica, resumed.level_of_replica)
    assert torch.equal(sim.integrator.temperature, other.integrator.temperature)
    assert torch.equal(rex.attempts, resumed.attempts) and torch.equal(rex.accepts, resumed.accepts)
    assert torch.equal(rex.generator.get_state(), resumed.generator.get_state())
    assert int(rex.accepts.sum()) > 0


def test_exchange_state_must_match_the_run(tmp_path):
    sim = make_sim(replicas=4)
    rex = ReplicaExchange(sim, [300.0, 400.0], exchange_every=2)
    rex.run(4)
    path = rex.save(tmp_path / "tempering.pt")
    with pytest.raises(CheckpointError, match="from step 4, the simulation is at step 0"):
        ReplicaExchange(make_sim(replicas=4), [300.0, 400.0]).load(path)
    with pytest.raises(CheckpointError, match="ladder"):
        ReplicaExchange(make_sim(replicas=4), [300.0, 500.0]).load(path)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable exchange state"):
        rex.load(tmp_path / "junk.pt")
    with pytest.raises(FileNotFoundError):
        rex.load(tmp_path / "missing.pt")


def test_csv_log_has_one_row_per_round_and_appends(tmp_path):
    sim = make_sim(replicas=4)
    rex = ReplicaExchange(sim, [300.0, 330.0], exchange_every=2)
    path = rex.open_log(tmp_path / "exchanges.csv")
    rex.run(6)
    rex.open_log(path, append=True)
    rex.run(2)
    rex.close()
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == [
        "step",
        "parity",
        "attempted_0_1",
        "accepted_0_1",
        "level_000",
        "level_001",
        "level_002",
        "level_003",
    ]
    assert [int(r["step"]) for r in rows] == [2, 4, 6, 8]
    assert [int(r["parity"]) for r in rows] == [0, 1, 0, 1]
    assert [int(r["attempted_0_1"]) for r in rows] == [2, 0, 2, 0]
    assert sum(int(r["accepted_0_1"]) for r in rows) == int(rex.accepts[0])
    last = [int(rows[-1][f"level_{r:03d}"]) for r in range(4)]
    assert last == rex.level_of_replica.tolist()


# -- sampling ---------------------------------------------------------------------------
# CLN025's 48 native bonds alone (a tree: 48 independent radial springs), so each level
# must hold ⟨E⟩ = 48 · k_B T / 2 and a kinetic temperature T. Four levels 300–600 K,
# 16 walkers, exchanges every 10 steps (10 fs) with ~40 % acceptance: faster than the
# springs' energy decorrelates (friction 10 / ps; correlation ~0.15 at 100 steps, ~0 at
# 400), so a wrong rule cannot hide (see below). Standard errors come from 10 blocks of
# 400 steps each; one level's mean energy then has a standard error of ~1 %.
LADDER = (300.0, 600.0, 4)
WALKERS = 16
SAMPLES = 800  # one every 5 steps
BLOCKS = 10


def sample_levels():
    """Mean potential energy and kinetic temperature per level, each (SAMPLES, L)."""
    sys = tiny_system()
    integrator = LangevinIntegrator(0.001, 10.0, 300.0)
    levels = LADDER[2]
    sim = Simulation(sys, bonds_only_potential(sys), integrator, replicas=levels * WALKERS, seed=11)
    rex = ReplicaExchange(sim, geometric_ladder(*LADDER), exchange_every=10)
    rex.run(400)
    energy, kinetic = [], []
    for _ in range(SAMPLES):
        rex.run(5)
        level = rex.level_of_replica
        per_level = torch.zeros(levels, dtype=torch.float64)
        energy.append(per_level.index_add(0, level, sim.energy.double()) / WALKERS)
        kinetic.append(per_level.index_add(0, level, sim.kinetic_temperature().double()) / WALKERS)
    assert not bool(sim.frozen.any())
    return torch.stack(energy), torch.stack(kinetic), rex


def boltzmann_misfits(energy: torch.Tensor, temperatures: torch.Tensor) -> list[str]:
    """Levels whose mean spring energy is off 48 k_B T / 2 by more than 4 σ + 1 %.

    The 1 % covers the radial springs' r² Jacobian and BAOAB's small bias at 1 fs.
    """
    misfits = []
    for k, t in enumerate(temperatures.tolist()):
        expected = 48 * KB * t / 2
        mean, se = float(energy[:, k].mean()), block_standard_error(energy[:, k], BLOCKS)
        assert se < 0.02 * expected, f"too few samples at {t:.0f} K: {se:.3f} kcal/mol"
        if abs(mean - expected) > 4 * se + 0.01 * expected:
            misfits.append(f"{t:.0f} K: {mean:.3f} vs {expected:.3f} kcal/mol")
    return misfits


@pytest.fixture(scope="module")
def ladder_samples():
    return sample_levels()


def test_every_level_samples_its_boltzmann_distribution(ladder_samples):
    energy, kinetic, rex = ladder_samples
    assert not boltzmann_misfits(energy, rex.temperatures)
    for k, t in enumerate(rex.temperatures.tolist()):
        mean, se = float(kinetic[:, k].mean()), block_standard_error(kinetic[:, k], BLOCKS)
        assert abs(mean - t) < 4 * se + 0.005 * t, f"kinetic {mean:.1f} K at level {t:.0f} K"


def test_replicas_really_travel_the_ladder(ladder_samples):
    _, _, rex = ladder_samples
    rates = rex.acceptance_rates()
    assert bool(((rates > 0.2) & (rates < 0.8)).all()), rates
    _, history = rex.level_history()
    visited = [len(set(history[:, r].tolist())) for r in range(history.shape[1])]
    assert min(visited) >= 2 and sum(visited) / len(visited) > 3.0, visited


def test_an_exchange_rule_blind_to_energy_would_be_caught(monkeypatch):
    """Accepting every swap (energies ignored) heats the cold levels and cools the hot ones
    by 10–25 %: the Boltzmann check above fails for most levels."""
    honest = tempering.attempt_exchanges

    def blind(energies, *args, **kwargs):
        return honest(torch.zeros_like(energies), *args, **kwargs)

    monkeypatch.setattr(tempering, "attempt_exchanges", blind)
    energy, _, rex = sample_levels()
    assert rex.acceptance_rates().tolist() == [1.0, 1.0, 1.0]
    assert len(boltzmann_misfits(energy, rex.temperatures)) >= 2
