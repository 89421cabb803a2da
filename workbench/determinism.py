"""Bitwise reproducibility check: two runs with the same seed must give identical trajectories."""

from __future__ import annotations

import torch

from workbench.model.options import KernelOptions
from workbench.runner import RunSettings, prepare_run


def trajectory_fingerprint(
    protein: str, replicas: int, steps: int, options: KernelOptions, device: str, seed: int = 7
) -> torch.Tensor:
    """Positions after every step of a fresh run, stacked, shape (steps, R, n, 3)."""
    sim = prepare_run(
        RunSettings(protein=protein, replicas=replicas, device=device, seed=seed, options=options)
    ).simulation
    frames = []
    for _ in range(steps):
        sim.step(1)
        frames.append(sim.positions.clone())
    return torch.stack(frames)


def runs_are_bitwise_identical(
    protein: str = "1enh",
    replicas: int = 16,
    steps: int = 50,
    options: KernelOptions | None = None,
    device: str = "auto",
) -> bool:
    """Run twice with the same seed and compare every frame bit for bit."""
    options = options or KernelOptions.all_on()
    first = trajectory_fingerprint(protein, replicas, steps, options, device)
    second = trajectory_fingerprint(protein, replicas, steps, options, device)
    return bool(torch.equal(first, second))
