"""Fixtures of the distributed tests: a small saved model and run settings using it.

Every rank and actor builds its own simulation from :class:`RunSettings`, so the small
SchNet of ``helpers`` is saved once to a file that ``RunSettings.model`` points at.
"""

from __future__ import annotations

import pytest
from helpers import schnet_potential

from workbench.md import NeighborSettings
from workbench.model import save_potential
from workbench.runner import RunSettings


@pytest.fixture(scope="session")
def small_model(tmp_path_factory) -> str:
    """Path of a saved small SchNet + native priors for CLN025."""
    path = tmp_path_factory.mktemp("model") / "cln025-small.pt"
    save_potential(schnet_potential(seed=0), path)
    return str(path)


@pytest.fixture(scope="session")
def settings(small_model):
    """``settings(**changes)``: a small CPU ensemble run with the small model."""

    def make(**changes) -> RunSettings:
        base = dict(
            protein="cln025",
            replicas=5,
            steps=8,
            save_interval=4,
            seed=3,
            device="cpu",
            model=small_model,
            neighbors=NeighborSettings(skin=0.5),
        )
        return RunSettings(**{**base, **changes})

    return make
