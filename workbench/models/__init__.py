"""Trained potentials shipped with the package.

Each shipped model is named by protein and version: ``data/<protein>-v<N>.pt`` with its card
``<protein>-v<N>.json`` (which holds the training's epoch log). The newest version of
a protein is the one a run uses. A model of another architecture than that line's ships as a
line of its own, ``data/<protein>-<architecture>-v<N>.pt`` (``cln025-dp-v1.pt``: a Deep
Potential), the one a run of that architecture (``--arch dp``) uses. Its long validation
runs (model and teacher metrics, gzipped) live beside the package in
``workbench/models/validation/`` in the repository only: they are the evidence behind the
card's figures (``tests/models/test_shipped.py`` recomputes them) and are not installed.

A shipped model becomes the default of ``workbench run`` only once its card records a
validation against its teacher that passed every check; until then it is there to be run
with ``--model`` (and the run says why the demo model was used instead).
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

_VERSIONED = re.compile(r"^(?P<line>.+)-v(?P<version>\d+)\.pt$")


def model_line(protein: str, architecture: str | None = None) -> str:
    """The name of a line of shipped models: ``protein``, or ``<protein>-<architecture>``
    for the line of that architecture (``model_line("cln025", "dp") == "cln025-dp"``)."""
    return protein if architecture is None else f"{protein}-{architecture}"


def shipped_models() -> dict[str, list[Path]]:
    """Every shipped model file, by line (`model_line`), oldest version first.

    Returns
    -------
    dict of str to list of Path
        ``{"cln025": [.../cln025-v1.pt, ...], "cln025-dp": [.../cln025-dp-v1.pt], ...}``;
        empty when nothing ships.
    """
    folder = Path(str(resources.files("workbench.models") / "data"))
    found: dict[str, list[tuple[int, Path]]] = {}
    for path in folder.glob("*-v*.pt") if folder.is_dir() else ():
        match = _VERSIONED.match(path.name)
        if match is not None:
            found.setdefault(match["line"], []).append((int(match["version"]), path))
    return {line: [path for _, path in sorted(files)] for line, files in found.items()}


def shipped_model_file(protein: str, mapping: str = "five-bead",
                       architecture: str | None = None) -> Path | None:
    """Path of the newest model file shipped for a bundled protein, validated or not (or None).

    Parameters
    ----------
    protein : str
        Bundled protein name (``"cln025"``, ``"1enh"``, ...).
    mapping : str
        Shipped models use the five-bead mapping.
    architecture : str or None
        A network architecture (``"dp"``): the newest of the protein's line of it where
        one ships, else the protein's own line (whose network the caller checks). None: the
        protein's own line.
    """
    if mapping != "five-bead":
        return None
    lines = shipped_models()
    versions = lines.get(model_line(protein, architecture)) or lines.get(protein)
    return versions[-1] if versions else None


def validation_passed(model_file: str | Path) -> bool:
    """Whether the model card beside ``model_file`` records a passing validation against
    the teacher (False without a card or a validation).

    A long run (``validate --runs``: both ensembles sampled for nanoseconds) decides where
    the card records one: Q histograms, folded fractions and events are equilibrium
    properties, and short runs from the native structure (``workbench validate``) measure
    them only for a protein that stays folded. Without a long run, every short run must
    pass every check."""
    card = Path(model_file).with_suffix(".json")
    if not card.is_file():
        return False
    try:
        validation = json.loads(card.read_text()).get("validation") or {}
    except (json.JSONDecodeError, AttributeError):
        return False
    long_run = validation.get("long_run") or {}
    if long_run.get("passes"):
        return all(long_run["passes"].values())
    results = validation.get("results") or []
    return bool(results) and all(all(r.get("passes", {}).values()) for r in results)


def shipped_model_path(protein: str, mapping: str = "five-bead",
                       architecture: str | None = None) -> Path | None:
    """The validated shipped model of a bundled protein: the default of a run, or None
    (``architecture``: as `shipped_model_file`)."""
    path = shipped_model_file(protein, mapping, architecture)
    return path if path is not None and validation_passed(path) else None
