"""How long the workbench and the notebooks run: a demo, a laptop or full length.

* ``demo``: seconds of run to see every panel work (CI and tests: ``WORKBENCH_MODE=demo``,
  or ``WORKBENCH_SHORT=1``).
* ``laptop``: the default without a GPU. CLN025 × 8 with its trained model at 340 K, half
  the replicas started unfolded, tabulated filters on, for about two minutes of wall
  time: at the CPU path's
  recorded 600–750 timestep·mol/s (tabulated filters in PyTorch, two cores) that is about
  36 ps per replica, in which a GPU run of the same settings gave 1 to 10 folding or
  unfolding events in every group of eight replicas (`docs/decisions/0012-laptop-mode.md`).
* ``full``: the default on a GPU. 64 replicas, 20,000 steps.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, replace

import torch

from workbench.model.options import KernelOptions
from workbench.runner import RunSettings

MODE_ENV, SHORT_ENV = "WORKBENCH_MODE", "WORKBENCH_SHORT"

#: Timestep·mol/s the laptop mode is sized for (the CPU path, CLN025 × 8, two cores).
LAPTOP_RATE = 600.0


@dataclass(frozen=True)
class RunMode:
    """Settings of one run length.

    Attributes
    ----------
    name : str
    settings : RunSettings
        Defaults of the Launch panel and the notebooks' runs.
    seconds : float or None
        Wall-time budget of the notebooks' runs (they stop at it, whatever the step);
        None: they run their steps.
    race_steps : int
        Steps of each side of the speedup demo's race.
    """

    name: str
    settings: RunSettings
    seconds: float | None
    race_steps: int


def _laptop() -> RunMode:
    seconds, replicas = 120.0, 8
    settings = RunSettings(
        protein="cln025",
        replicas=replicas,
        steps=int(LAPTOP_RATE * seconds / replicas),
        temperature=340.0,
        denatured_fraction=0.5,
        save_interval=50,
        exchange_every=50,
        options=KernelOptions(tabulated_filter=True),  # in PyTorch off a GPU
    )
    return RunMode("laptop", settings, seconds, race_steps=100)


MODES = {
    "demo": RunMode(
        "demo",
        RunSettings(protein="cln025", replicas=2, steps=20, save_interval=2, exchange_every=2),
        None,
        race_steps=4,
    ),
    "laptop": _laptop(),
    "full": RunMode(
        "full", RunSettings(protein="cln025", replicas=64, steps=20000, save_interval=100),
        None, race_steps=1000,
    ),
}


def run_mode() -> RunMode:
    """The mode asked for by ``WORKBENCH_MODE`` (``demo``, ``laptop`` or ``full``), else
    ``demo`` under ``WORKBENCH_SHORT=1``, else ``full`` with a CUDA GPU and ``laptop``
    without.

    Raises
    ------
    ValueError
        ``WORKBENCH_MODE`` names no mode.
    """
    name = os.environ.get(MODE_ENV, "").strip().lower()
    if name:
        if name not in MODES:
            raise ValueError(f"{MODE_ENV} must be one of {', '.join(MODES)}, got {name!r}")
        return MODES[name]
    if os.environ.get(SHORT_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return MODES["demo"]
    return MODES["full" if torch.cuda.is_available() else "laptop"]


def default_settings(mode: str | None = None, **changes) -> RunSettings:
    """Settings for a notebook or the workbench in a mode.

    Parameters
    ----------
    mode : str, optional
        A key of :data:`MODES`; :func:`run_mode` by default.
    **changes
        Fields of :class:`~workbench.runner.RunSettings` to override.
    """
    chosen = run_mode() if mode is None else MODES[mode]
    return replace(copy.deepcopy(chosen.settings), **changes)
