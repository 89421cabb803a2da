"""Whole-step CUDA graphs on a GPU: replays give the eager trajectory bit for bit (with
deterministic CSR aggregation), overflow is redone, and a step is one graph launch."""

from __future__ import annotations

import pytest
import torch

from workbench.benchmark import launches_per_step
from workbench.model.options import KernelOptions
from workbench.runner import RunSettings, prepare_run

pytestmark = pytest.mark.gpu


def run(options: KernelOptions, replicas: int = 16, protein: str = "1enh"):
    settings = RunSettings(protein=protein, replicas=replicas, device="cuda", seed=3,
                           options=options)
    return prepare_run(settings).simulation


@pytest.mark.parametrize("tables", [False, True], ids=["exact", "tables"])
def test_graph_replays_match_eager_steps_bitwise(tables):
    eager = run(KernelOptions.all_on(tabulated_filter=tables))
    graphed = run(KernelOptions.all_on(tabulated_filter=tables, cuda_graph=True))
    eager.step(30)
    graphed.step(30)
    assert graphed._captured is not None and graphed._captured.cuda_graph is not None
    for name, a, b in zip(eager.state._fields, eager.state, graphed.state, strict=True):
        assert torch.equal(a, b), name


def test_overflow_is_redone_on_the_gpu():
    eager = run(KernelOptions.all_on())
    graphed = run(KernelOptions.all_on(cuda_graph=True))
    graphed.step(1)
    eager.step(1)
    graphed._captured.slots = 64
    graphed.step(10)
    eager.step(10)
    assert graphed._captured.slots > 64
    assert torch.equal(eager.positions, graphed.positions)


def test_a_step_is_a_graph_launch_instead_of_hundreds():
    graphed = launches_per_step(run(KernelOptions.all_on(cuda_graph=True)), steps=50)
    eager = launches_per_step(run(KernelOptions.all_on()), steps=5)
    # one graph launch plus the generators' seed/offset updates per replay
    assert graphed["host_launches_per_step"] < 5.0
    assert eager["host_launches_per_step"] > 20 * graphed["host_launches_per_step"]
