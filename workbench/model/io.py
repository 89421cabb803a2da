"""Saving and loading potentials: a state dict plus a JSON config in one file.

The file is a ``torch.save`` archive of ``{"format", "version", "config",
"state_dict"}`` where ``config`` is a JSON string: ``architecture`` (the registered
name of the network, ``"schnet"``, ``"painn"``, ...; None for a prior-only potential),
the network's config under that same name, the priors and the metadata. Files written
before the architecture was recorded hold a ``"schnet"`` config only and load as SchNet.
It is read back with ``torch.load(weights_only=True)``, so no arbitrary pickle is ever
executed.
Integer tensors (the priors' bead indices) are stored in the narrowest of int16 and int32
their values fit (version 3; version 2 stored int32 only, version 1 int64) and read back as
int64: a quarter of the bytes of a large protein's pair list.
Writes are atomic (a temporary file in the same folder, then a rename).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from workbench.files import atomic_save
from workbench.model.architectures import ARCHITECTURES, build_network
from workbench.model.potential import Potential
from workbench.model.priors import PRIOR_CLASSES

FORMAT = "cg-workbench-potential"
VERSION = 3


class ModelFormatError(ValueError):
    """A file is not a potential saved by this project, or is inconsistent."""


class ForeignModelError(ModelFormatError):
    """A file that is not a potential of this project at all (maybe another program's)."""


def potential_config(potential: Potential) -> dict:
    """JSON-able description of a potential's structure (not its numbers).

    ``architecture`` names the network and its config sits under that name; a
    prior-only potential keeps ``"schnet": None`` (the form every reader knows).
    """
    network, name = potential.network, potential.architecture
    config = {"architecture": name}
    if network is None:
        config["schnet"] = None
    else:
        config[name] = network.config.to_dict()
    return {
        **config,
        "priors": [{"name": n, "class": type(p).__name__} for n, p in potential.priors.items()],
        "metadata": getattr(potential, "metadata", {}),
    }


def save_potential(potential: Potential, path: str | os.PathLike) -> Path:
    """Write ``potential`` to ``path`` (see module docstring)."""
    state = {k: _stored(v.detach().cpu()) for k, v in potential.state_dict().items()}
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "config": json.dumps(potential_config(potential)),
        "state_dict": state,
    }
    return atomic_save(payload, path)


def _stored(tensor: torch.Tensor) -> torch.Tensor:
    """int64 tensors as the narrowest of int16 and int32 their values fit (`_loaded` undoes
    it)."""
    if tensor.dtype == torch.int64 and tensor.numel():
        low, high = int(tensor.min()), int(tensor.max())
        for dtype in (torch.int16, torch.int32):
            info = torch.iinfo(dtype)
            if info.min <= low and high <= info.max:
                return tensor.to(dtype)
    return tensor


def _loaded(tensor: torch.Tensor) -> torch.Tensor:
    """A stored tensor as the potential holds it: int16 and int32 back to int64."""
    return tensor.to(torch.int64) if tensor.dtype in (torch.int16, torch.int32) else tensor


def load_potential(path: str | os.PathLike, map_location: str = "cpu") -> Potential:
    """Read a potential written by :func:`save_potential`.

    Raises
    ------
    FileNotFoundError
        No such file.
    ForeignModelError
        Not a file of this format.
    ModelFormatError
        A damaged file of this format: a tensor of the wrong shape or with NaN or
        infinite values (the message names it).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no model file at {path}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a format error
        raise ForeignModelError(f"{path} is not a readable model file: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ForeignModelError(
            f"{path} is not a {FORMAT} file (published CGSchNet checkpoints are read by "
            "workbench.model.mlcg_import)"
        )
    try:
        config = json.loads(payload["config"])
        state = {k: _loaded(v) for k, v in payload["state_dict"].items()}
        if "architecture" in config:
            name = config["architecture"]
        else:  # written before architectures were recorded: SchNet or prior-only
            name = "schnet" if config["schnet"] is not None else None
        network = None
        if name is not None:
            if name not in ARCHITECTURES:
                raise ModelFormatError(
                    f"{path} holds a network of architecture {name!r}, which this version "
                    f"does not know (known: {', '.join(sorted(ARCHITECTURES))})"
                )
            network = build_network(name, config[name])
        priors = {}
        for entry in config["priors"]:
            cls = PRIOR_CLASSES.get(entry["class"])
            if cls is None:
                raise ModelFormatError(f"unknown prior class {entry['class']!r} in {path}")
            prefix = f"priors.{entry['name']}."
            tensors = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            priors[entry["name"]] = cls(**tensors)
        potential = Potential(state["bead_types"], network, priors)
        potential.load_state_dict(state)
    except ModelFormatError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        # a missing key, bad JSON, a prior tensor of the wrong size, or a state dict that
        # does not fit the config: all mean the file is damaged, not a caller error
        detail = " ".join(str(exc).split())
        raise ModelFormatError(f"{path} is a damaged {FORMAT} file, its tensors do not match "
                               f"its config: {detail}") from exc
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise ModelFormatError(f"{path} is a damaged {FORMAT} file: tensor {name} holds "
                                   f"{bad} NaN or infinite values")
    potential.metadata = config.get("metadata", {})
    return potential
