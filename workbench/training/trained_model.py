"""A trained model file read back with what it was trained against: its system and teacher."""

from __future__ import annotations

import os

from workbench.model.io import ModelFormatError, load_potential
from workbench.model.potential import Potential
from workbench.model_fit import check_model_fits
from workbench.system import build_system
from workbench.system.cg_system import CGSystem
from workbench.teacher import teacher_potential


def model_and_teacher(path: str | os.PathLike) -> tuple[Potential, CGSystem, Potential]:
    """A model file written by ``workbench train``: its potential, its system and the
    structure-based teacher it was trained on (rebuilt from the model's metadata).

    Raises
    ------
    ModelFormatError
        The model's metadata records no teacher (it was not made by training).
    """
    potential = load_potential(path)
    teacher_meta = potential.metadata.get("teacher")
    if not isinstance(teacher_meta, dict) or "epsilon" not in teacher_meta:
        raise ModelFormatError(f"{path} has no teacher in its metadata (not made by train)")
    system = build_system(potential.metadata["protein"])
    check_model_fits(potential, system, str(path))
    teacher = teacher_potential(system, teacher_meta["epsilon"], teacher_meta.get("dihedral_ratio"),
                                teacher_meta.get("contact_separation"),
                                teacher_meta.get("contact_barrier"))
    return potential, system, teacher
