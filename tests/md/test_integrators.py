"""Integrators: Maxwell–Boltzmann velocities, Langevin equipartition with per-replica
temperatures, NVE energy conservation, parameter validation."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    block_standard_error,
    bonds_only_potential,
    prior_potential,
    schnet_potential,
    tiny_system,
)

from workbench.md import LangevinIntegrator, Simulation, VelocityVerletIntegrator
from workbench.md.integrators import as_temperatures, maxwell_boltzmann
from workbench.units import KB, KCAL_TO_AMU_A2_PS2


# -- validation -----------------------------------------------------------------------
@pytest.mark.parametrize("bad", [-300.0, 0.0, float("nan"), float("inf"), [300.0, -1.0], []])
def test_bad_temperatures_are_refused(bad):
    with pytest.raises(ValueError, match="temperature"):
        LangevinIntegrator(temperature=bad)
    with pytest.raises(ValueError, match="temperature"):
        as_temperatures(bad)


@pytest.mark.parametrize("dt", [0.0, -0.004, float("nan"), float("inf")])
def test_bad_time_step_is_refused(dt):
    with pytest.raises(ValueError, match="time step must be positive"):
        LangevinIntegrator(timestep=dt)
    with pytest.raises(ValueError, match="time step must be positive"):
        VelocityVerletIntegrator(dt)


@pytest.mark.parametrize("friction", [-1.0, float("nan")])
def test_bad_friction_is_refused(friction):
    with pytest.raises(ValueError, match="friction must be non-negative"):
        LangevinIntegrator(friction=friction)


def test_config_is_json_friendly():
    config = LangevinIntegrator(0.002, 0.5, [300.0, 350.0]).config()
    assert config == {"type": "LangevinIntegrator", "timestep": 0.002, "friction": 0.5,
                      "temperature": [300.0, 350.0]}


# -- Maxwell–Boltzmann ----------------------------------------------------------------
def test_maxwell_boltzmann_variance_per_mass_and_temperature():
    masses = torch.tensor([12.0, 14.0, 16.0, 100.0])
    temps = torch.tensor([300.0, 600.0]).repeat_interleave(2000)
    gen = torch.Generator().manual_seed(0)
    vel = maxwell_boltzmann(masses, temps, 4000, gen)
    assert vel.shape == (4000, 4, 3)
    for half, t in ((slice(0, 2000), 300.0), (slice(2000, 4000), 600.0)):
        var = vel[half].pow(2).mean((0, 2))  # per bead: 6000 samples each
        expected = KB * t * KCAL_TO_AMU_A2_PS2 / masses
        # relative standard error of a variance from 6000 normal samples: sqrt(2/6000) ≈ 1.8 %
        torch.testing.assert_close(var, expected, rtol=0.08, atol=0)
    assert abs(float(vel.mean())) < 0.05


def test_maxwell_boltzmann_needs_one_temperature_per_replica():
    with pytest.raises(ValueError, match="3 temperatures given for 4 replicas"):
        maxwell_boltzmann(torch.ones(5), torch.tensor([300.0, 310.0, 320.0]), 4, None)


def test_temperature_count_must_match_replicas_in_a_simulation():
    sys = tiny_system()
    with pytest.raises(ValueError, match="3 temperatures given for 4 replicas"):
        Simulation(sys, prior_potential(sys), LangevinIntegrator(temperature=[300, 310, 320]),
                   replicas=4)


# -- Langevin equipartition -----------------------------------------------------------
# A purely harmonic system (CLN025's 48 native bonds, a tree, so 48 independent radial
# springs plus free rotations) sampled by BAOAB. Temperatures alternate 300 K / 350 K
# over the replicas. dt = 1 fs keeps BAOAB's known kinetic-temperature bias small: at
# integer steps ⟨KE⟩ is low by about (h ω / 2)² per mode, ω ≤ 140 ps⁻¹ for these
# springs, so at most 0.5 % and less on average. Friction 10 / ps keeps the correlation
# time of the kinetic energy near 0.14 ps.
EQ_REPLICAS = 64
EQ_STEPS = 3000
EQ_EQUILIBRATION = 400
TEMPS = [300.0, 350.0] * (EQ_REPLICAS // 2)


@pytest.fixture(scope="module")
def langevin_samples():
    sys = tiny_system()
    potential = bonds_only_potential(sys)
    sim = Simulation(sys, potential, LangevinIntegrator(0.001, 10.0, TEMPS),
                     replicas=EQ_REPLICAS, seed=7)
    sim.step(EQ_EQUILIBRATION)
    temperature, bond_energy = [], []
    for _ in range(EQ_STEPS):
        sim.step(1)
        temperature.append(sim.kinetic_temperature())
        bond_energy.append(sim.energy)
    assert not bool(sim.frozen.any())
    return torch.stack(temperature).double(), torch.stack(bond_energy).double()


@pytest.mark.parametrize("target", [300.0, 350.0])
def test_langevin_reaches_the_set_kinetic_temperature(langevin_samples, target):
    temperature, _ = langevin_samples
    group = torch.tensor(TEMPS) == target
    series = temperature[:, group].mean(1)
    mean, se = float(series.mean()), block_standard_error(series)
    # per-sample relative sd sqrt(2/147) ≈ 0.117, ~20 independent samples per replica,
    # 32 replicas ⇒ ≈ 0.4 % (1.0–1.3 K). The data must agree that sampling was sufficient.
    assert se < 0.006 * target, f"too few samples: standard error {se:.2f} K"
    # 4 standard errors plus the ≤ 0.5 % BAOAB bias
    assert abs(mean - target) < 4 * se + 0.005 * target, f"{mean:.2f} K vs {target} K"


def test_each_replica_keeps_its_own_temperature(langevin_samples):
    temperature, _ = langevin_samples
    per_replica = temperature.mean(0)
    targets = torch.tensor(TEMPS, dtype=torch.float64)
    # One replica's time average has a standard error of ≈ 2.5 % (the kinetic energy
    # exchanges with the springs, so its correlation time is ~0.14 ps); 13 % is 5 sigma.
    # The group tests above already fail if temperatures go to the wrong replicas.
    assert float(((per_replica - targets) / targets).abs().max()) < 0.13
    hot, cold = per_replica[targets == 350.0].mean(), per_replica[targets == 300.0].mean()
    assert float(hot / cold) == pytest.approx(350.0 / 300.0, rel=0.03)


@pytest.mark.parametrize("target", [300.0, 350.0])
def test_langevin_samples_the_boltzmann_distribution_of_the_springs(langevin_samples, target):
    """Configurational check: each harmonic bond holds k_B T / 2 on average.

    BAOAB samples positions of a harmonic system exactly; this catches force or unit
    errors that leave the kinetic temperature alone.
    """
    _, bond_energy = langevin_samples
    group = torch.tensor(TEMPS) == target
    series = bond_energy[:, group].mean(1)
    expected = 48 * KB * target / 2
    se = block_standard_error(series)
    assert se < 0.02 * expected
    assert abs(float(series.mean()) - expected) < 4 * se + 0.01 * expected


def test_zero_friction_langevin_is_velocity_verlet():
    sys = tiny_system()
    potential = prior_potential(sys)
    a = Simulation(sys, potential, LangevinIntegrator(0.002, 0.0, 300.0), replicas=2, seed=3)
    b = Simulation(sys, potential, VelocityVerletIntegrator(0.002), replicas=2, seed=3)
    assert torch.equal(a.velocities, b.velocities)
    a.step(20)
    b.step(20)
    torch.testing.assert_close(a.positions, b.positions, rtol=0, atol=1e-4)
    torch.testing.assert_close(a.velocities, b.velocities, rtol=0, atol=1e-2)


# -- NVE ------------------------------------------------------------------------------
def run_nve(potential, replicas: int, steps: int):
    """Thermalise at 300 K with Langevin, then run velocity Verlet at dt = 4 fs.

    Returns total energy (steps, R) and mean kinetic energy (R,), float64.
    """
    sys = tiny_system()
    warm = Simulation(sys, potential, LangevinIntegrator(0.002, 10.0, 300.0),
                      replicas=replicas, seed=1)
    warm.step(150)
    nve = Simulation(sys, potential, VelocityVerletIntegrator(0.004), replicas=replicas,
                     positions=warm.positions, seed=2)
    total, kinetic = [], []
    for _ in range(steps):
        nve.step(1)
        total.append(nve.energy.double() + nve.kinetic_energy().double())
        kinetic.append(nve.kinetic_energy().double())
    assert not bool(nve.frozen.any())
    return torch.stack(total), torch.stack(kinetic).mean(0)


def drift_and_fluctuation(total: torch.Tensor, kinetic: torch.Tensor):
    """Least-squares drift over the whole run and the standard deviation, both / ⟨KE⟩."""
    t = torch.arange(len(total), dtype=torch.float64)
    tc = t - t.mean()
    slope = (tc[:, None] * (total - total.mean(0))).sum(0) / (tc * tc).sum()
    return (slope * len(total)).abs() / kinetic, total.std(0) / kinetic


# Bounds: velocity Verlet conserves a shadow energy; the true energy oscillates with a
# relative amplitude ~(h ω)² / 12 in the stiffest modes (native bonds, ω ≈ 140 ps⁻¹,
# h ω ≈ 0.56 at 4 fs ⇒ a few % of those modes' energy, which is a third of the total),
# measured 0.5–0.7 % of ⟨KE⟩ with no systematic drift (< 0.1 % over these runs, < 0.3 %
# over 1000 steps). The bounds (2 % fluctuation, 1 % drift over the run) leave a factor
# of three or more for that, while forces that are not −∇E (a missing derivative, a
# wrong factor between energy and force) break them (see the next test).
@pytest.mark.parametrize(
    ("make", "replicas", "steps"),
    [
        (lambda: prior_potential(), 4, 300),
        (lambda: schnet_potential(seed=2), 2, 200),
    ],
    ids=["priors", "schnet+priors"],
)
def test_velocity_verlet_conserves_energy_at_4_fs(make, replicas, steps):
    total, kinetic = run_nve(make(), replicas, steps)
    drift, fluctuation = drift_and_fluctuation(total, kinetic)
    assert float(kinetic.min()) > 20.0  # thermal: ~3/2 · 49 · k_B · 300 K ≈ 44 kcal/mol
    assert float(fluctuation.max()) < 0.02, fluctuation
    assert float(drift.max()) < 0.01, drift


def test_inconsistent_forces_would_be_caught(monkeypatch):
    """The NVE bounds can fail: forces at half of −∇E (a ½-convention mismatch between the
    energy and its forces) give fluctuations of ~8 % of ⟨KE⟩."""
    potential = prior_potential()
    original = potential.energy_and_forces

    def wrong(pos, graph, options=None):
        energy, forces = original(pos, graph, options)
        return energy, 0.5 * forces

    monkeypatch.setattr(potential, "energy_and_forces", wrong)
    total, kinetic = run_nve(potential, 2, 100)
    drift, fluctuation = drift_and_fluctuation(total, kinetic)
    assert float(torch.maximum(drift, fluctuation).max()) > 0.02
