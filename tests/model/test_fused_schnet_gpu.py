"""The exact fused path on a GPU at the benchmark's size: 1ENH, demo model, thermal
positions. Its FP32 mode (single-pass TF32 filter GEMMs) keeps the network's forces within
1e-3 of their RMS of the model evaluated in float64."""

from __future__ import annotations

import copy

import pytest

from workbench.model.options import KernelOptions
from workbench.model.potential import Potential
from workbench.runner import RunSettings, prepare_run

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("precision, bound", [("fp32", 1e-3), ("fp16", 1e-2)])
def test_exact_fused_network_force_error_against_float64(precision, bound):
    sim = prepare_run(RunSettings(protein="1enh", replicas=16, device="cuda", seed=0,
                                  options=KernelOptions())).simulation
    sim.step(50)  # thermal, not native, positions
    network = Potential(sim.potential.bead_types, sim.potential.schnet)
    _, f64 = copy.deepcopy(network).double().energy_and_forces(sim.positions.double(),
                                                               sim.graph)
    _, f = network.energy_and_forces(sim.positions, sim.graph,
                                     KernelOptions.all_on(precision))
    err = float((f.double() - f64).pow(2).mean().sqrt() / f64.pow(2).mean().sqrt())
    print(f"{precision}: network force error {err:.2e} of the force RMS")
    assert err <= bound
