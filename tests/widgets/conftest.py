"""A fake engine for the widget tests: the controller's contract without the physics."""

from __future__ import annotations

import time
import warnings
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from workbench.model.options import KernelOptions
from workbench.runner import PreparedRun, RunSettings


class FakeSimulation:
    """Steps instantly (or slowly), records the options of every step, can raise or warn.

    Parameters
    ----------
    replicas, beads : int
    step_seconds : float
        Sleep per step.
    fail_at : int, optional
        Step count at which ``step`` raises RuntimeError.
    refuse_fused : bool
        Raise when asked to step with non-baseline options.
    warn_fused : bool
        Warn when stepping with non-baseline options.
    system : CGSystem, optional
        A real system: the replicas start at its native structure and every step moves
        each bead by up to ``jitter`` Å (so neighbours come and go); ``beads`` is ignored.
    jitter : float
    neighbor_list : object, optional
        What ``Simulation.neighbor_list`` would be (None: a potential without a network).
    """

    def __init__(
        self,
        replicas=2,
        beads=5,
        step_seconds=0.0,
        fail_at=None,
        refuse_fused=False,
        warn_fused=False,
        system=None,
        jitter=0.05,
        neighbor_list=None,
    ):
        self.replicas = replicas
        self.device = torch.device("cpu")
        self.options = KernelOptions()
        self.step_count = 0
        self.system = system
        if system is None:
            self.positions = torch.arange(replicas * beads * 3, dtype=torch.float32).reshape(
                replicas, beads, 3
            )
        else:
            self.positions = system.native_positions.cpu().repeat(replicas, 1, 1)
        self.jitter = jitter
        self._noise = torch.Generator().manual_seed(0)
        self.potential = SimpleNamespace(cutoff=10.0, architecture="schnet")
        self.graph = None
        self.neighbor_list = neighbor_list
        self.step_seconds = step_seconds
        self.fail_at = fail_at
        self.refuse_fused = refuse_fused
        self.warn_fused = warn_fused
        self.options_seen: list[KernelOptions] = []

    def step(self, steps=1):
        for _ in range(steps):
            if self.fail_at is not None and self.step_count == self.fail_at:
                raise RuntimeError("engine exploded")
            if not self.options.is_baseline and self.refuse_fused:
                raise RuntimeError("no fused kernel for this device")
            if not self.options.is_baseline and self.warn_fused:
                warnings.warn("fused kernel unavailable, using reference", stacklevel=2)
                # what a library says while the engine builds its tables: not for the user
                warnings.warn("`torch.jit.script` is deprecated", DeprecationWarning, stacklevel=2)
            if self.step_seconds:
                time.sleep(self.step_seconds)
            if self.system is not None:
                noise = torch.rand(self.positions.shape, generator=self._noise) - 0.5
                self.positions += 2 * self.jitter * noise
            self.step_count += 1
            self.options_seen.append(replace(self.options))

    def metrics(self):
        r = self.replicas
        ramp = torch.linspace(0.0, 1.0, r)
        return {
            "rmsd": 0.1 * self.step_count + ramp,
            "q": torch.clamp(1.0 - 0.01 * self.step_count - 0.1 * ramp, 0, 1),
            "potential_energy": torch.zeros(r),
            "kinetic_energy": torch.zeros(r),
            "temperature": torch.full((r,), 300.0),
            "frozen": torch.zeros(r, dtype=torch.bool),
        }

    def frozen_report(self):
        return []


@pytest.fixture
def fake_run():
    """``make(**kwargs) -> (prepare, sim)``: a prepare function returning a FakeSimulation."""

    def make(**kwargs):
        sim = FakeSimulation(**kwargs)

        def prepare(settings: RunSettings) -> PreparedRun:
            sim.options = settings.options
            return PreparedRun(settings, None, sim, ["fake engine"])

        return prepare, sim

    return make


@pytest.fixture
def ladder_settings(tmp_path):
    """Settings of a real run on a 300–400 K ladder (2 levels × 2 walkers, exchanges every
    2 steps) with a fast prior-only model, saved to a file as a user's model would be."""
    from helpers import prior_potential

    from workbench.model import save_potential

    model = save_potential(prior_potential(), tmp_path / "priors.pt")
    return RunSettings(
        replicas=4,
        steps=20,
        save_interval=5,
        ladder=(300.0, 400.0, 2),
        exchange_every=2,
        device="cpu",
        model=str(model),
    )


@pytest.fixture
def gpu_like(monkeypatch):
    """Pretend the fused path can run (as on a GPU) so switches reach the simulation."""
    monkeypatch.setattr(
        "widgets.controller.usable_options",
        lambda options, device, architecture: (options, None),
    )
