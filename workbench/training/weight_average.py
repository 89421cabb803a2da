"""An exponential moving average of a network's weights over the optimiser steps.

For a 35-residue protein the model's folded fraction swings between epochs whose force
errors hardly differ (1YRF: from 0.91 to 0.05 within five epochs at a validation force RMSE
of 0.77-0.85; docs/decisions/0009-force-error-does-not-select-models.md): the last optimiser
steps before a checkpoint can move the free energies of whole basins by several kT.
Averaging the weights over the last ``~1 / (1 − decay)`` steps takes that step-to-step noise
out of the kept model while the optimiser goes on with the raw weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


class WeightAverage:
    """``shadow ← decay · shadow + (1 − decay) · weights`` after every optimiser step.

    Parameters
    ----------
    module : torch.nn.Module
        The network; its state at construction starts the average.
    decay : float
        In [0, 1): 0 keeps the latest weights, 0.999 averages over about 1,000 steps.

    Attributes
    ----------
    shadow : dict of str to torch.Tensor
        The averaged state (floating-point entries averaged, the others copied).
    """

    def __init__(self, module: torch.nn.Module, decay: float):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"weight-average decay must lie in [0, 1), got {decay}")
        self.decay = decay
        self.shadow = {k: v.detach().clone() for k, v in module.state_dict().items()}

    def update(self, module: torch.nn.Module) -> None:
        """Fold ``module``'s current state into the average (after an optimiser step)."""
        with torch.no_grad():
            for name, value in module.state_dict().items():
                average = self.shadow[name]
                if average.is_floating_point():
                    average.lerp_(value, 1.0 - self.decay)
                else:
                    average.copy_(value)

    @contextmanager
    def applied(self, module: torch.nn.Module) -> Iterator[None]:
        """Inside the block ``module`` holds the averaged weights; its own come back after
        it (exceptions included)."""
        raw = {k: v.detach().clone() for k, v in module.state_dict().items()}
        module.load_state_dict(self.shadow)
        try:
            yield
        finally:
            module.load_state_dict(raw)
