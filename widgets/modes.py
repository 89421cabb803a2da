"""Short mode (CI and CPU machines) versus full-length runs on a GPU."""

from __future__ import annotations

import copy
import os
from dataclasses import replace

import torch

from workbench.runner import RunSettings

SHORT_ENV = "WORKBENCH_SHORT"

SHORT = RunSettings(protein="cln025", replicas=2, steps=20, save_interval=2, exchange_every=2)
FULL = RunSettings(protein="cln025", replicas=64, steps=20000, save_interval=100)


def short_mode() -> bool:
    """True when ``WORKBENCH_SHORT`` is set to a true value or no CUDA GPU is present.

    ``WORKBENCH_SHORT=0`` forces full-length runs even on a CPU.
    """
    value = os.environ.get(SHORT_ENV, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return not torch.cuda.is_available()


def default_settings(short: bool | None = None, **changes) -> RunSettings:
    """Settings for a notebook or the workbench, short or full length.

    Parameters
    ----------
    short : bool, optional
        Default: :func:`short_mode`.
    **changes
        Fields of :class:`~workbench.runner.RunSettings` to override.
    """
    if short is None:
        short = short_mode()
    return replace(copy.deepcopy(SHORT if short else FULL), **changes)
