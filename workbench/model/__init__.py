"""CGSchNet, CGPaiNN, prior terms and potentials."""

from workbench.model.io import ModelFormatError, load_potential, save_potential
from workbench.model.painn import CGPaiNN, PaiNNConfig
from workbench.model.potential import Potential
from workbench.model.priors import (
    CutoffRepulsion,
    FourierDihedrals,
    HarmonicAngles,
    HarmonicBonds,
    PriorTerm,
    Repulsion,
)
from workbench.model.schnet import CGSchNet, SchNetConfig

__all__ = [
    "CGPaiNN",
    "CGSchNet",
    "CutoffRepulsion",
    "FourierDihedrals",
    "HarmonicAngles",
    "HarmonicBonds",
    "ModelFormatError",
    "PaiNNConfig",
    "Potential",
    "PriorTerm",
    "Repulsion",
    "SchNetConfig",
    "load_potential",
    "save_potential",
]
