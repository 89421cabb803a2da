"""Trained potentials shipped with the package (``data/<protein>.pt`` plus a model card)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def shipped_model_path(protein: str, mapping: str = "five-bead") -> Path | None:
    """Path of the shipped potential for a bundled protein, or None if there is none.

    Parameters
    ----------
    protein : str
        Bundled protein name (``"cln025"``, ``"1enh"``, ...).
    mapping : str
        Shipped models use the five-bead mapping.
    """
    if mapping != "five-bead":
        return None
    candidate = Path(str(resources.files("workbench.models") / "data" / f"{protein}.pt"))
    return candidate if candidate.is_file() else None
