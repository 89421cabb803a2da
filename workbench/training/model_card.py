"""Model cards: what a trained potential is, what it was trained on and how well it fits.

A card is a JSON file next to the model (``<model stem>.json``); its ``training.log`` is the
epoch log of the training (see :func:`epoch_log`).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import torch

from workbench.files import atomic_write_text
from workbench.model.architectures import ARCHITECTURES, architecture_of_config
from workbench.training.data import data_temperatures, sampled_mask
from workbench.training.force_matching import LOG_COLUMNS, FitResult


def card_path(model_path: str | os.PathLike) -> Path:
    """Where the card of a model file lives: same folder and stem, ``.json``."""
    return Path(model_path).with_suffix(".json")


def epoch_log(rows: list[dict], columns: tuple[str, ...] = LOG_COLUMNS) -> dict:
    """The card's ``training.log``: one row of ``columns`` per epoch (None where a row has no
    value), ``{"columns": [...], "rows": [[...], ...]}``."""
    return {"columns": list(columns),
            "rows": [[_number(row.get(column)) for column in columns] for row in rows]}


def read_epoch_log(model_path: str | os.PathLike) -> list[dict]:
    """The epochs of a model's training, one dict per epoch, from its card's
    ``training.log``; a model whose card has none is read from the ``<model stem>.log.csv``
    that older versions wrote next to it. Empty where neither is found."""
    log = read_model_card(model_path).get("training", {}).get("log")
    if log is not None:
        return [dict(zip(log["columns"], row, strict=True)) for row in log["rows"]]
    path = Path(model_path).with_suffix(".log.csv")
    if not path.is_file():
        return []
    with open(path, newline="") as handle:
        return [{key: _number(value) for key, value in row.items()}
                for row in csv.DictReader(handle)]


def _number(value):
    """A log value as JSON has it: CSV text to int or float, ``""`` to None."""
    if not isinstance(value, str):
        return value
    if value == "":
        return None
    try:
        return int(value)
    except ValueError:
        return float(value)


def model_description(prior_settings: dict, architecture: str = "schnet") -> str:
    """The card's one-line ``model``: how the priors were made (``prior_settings`` is the
    card's priors record) and which network was trained (``architecture``, a key of
    :data:`~workbench.model.architectures.ARCHITECTURES`)."""
    refined = ", bonded terms refined by force matching" if "refinement" in prior_settings else ""
    network = ARCHITECTURES[architecture].network
    return f"{network} + priors fitted by Boltzmann inversion{refined}, trained by force matching"


def kept_prior_settings(start_from: str | os.PathLike, terms: list[str]) -> dict:
    """The priors record of a model whose priors were kept from the model ``start_from``.

    It is the record of the model that fitted them, read from the cards along the way,
    with ``kept_from`` listing the models they passed through (``start_from`` first).
    Cards of older continued models recorded only ``"method": "kept from PATH"``; such a
    card is followed to PATH's card. Where no card with the fit is found, ``method``
    says so.

    Parameters
    ----------
    start_from : str or path
        The model file training continued from.
    terms : list of str
        The prior terms (``list(priors)``).

    Returns
    -------
    dict
        JSON-able: the fit's fields, ``kept_from`` and ``terms``.
    """
    chain = [str(start_from)]
    record = _card_priors(start_from)
    while record is not None and str(record.get("method", "")).startswith("kept from "):
        earlier = record["method"].removeprefix("kept from ")
        if earlier in chain:  # a card naming a model already passed: no fit to find
            record = None
            break
        chain.append(earlier)
        record = _card_priors(earlier)
    record = dict(record) if record is not None else {
        "method": f"kept from {chain[-1]} (no card records how they were fitted)"
    }
    chain += [path for path in record.pop("kept_from", []) if path not in chain]
    record.pop("dihedrals_with_a_non_native_minimum", None)  # recounted for the new card
    return {**record, "kept_from": chain, "terms": list(terms)}


def _card_priors(model_path: str | os.PathLike) -> dict | None:
    """The priors record of the card beside ``model_path``, or None without one."""
    return read_model_card(model_path).get("priors")


def build_model_card(
    protein: str,
    teacher_metadata: dict,
    data: dict[str, torch.Tensor],
    config,
    fit: FitResult,
    prior_settings: dict,
    validation: dict | None = None,
) -> dict:
    """The card's content.

    Parameters
    ----------
    protein : str
    teacher_metadata : dict
        The teacher's ``metadata`` (holds ε).
    data : dict
        The training data set (``positions``, ``forces``, ``temperature``).
    config : dataclass
        The network's config, of any registered architecture (``SchNetConfig``,
        ``PaiNNConfig``, ...): the card's ``architecture`` names it and its ``to_dict()``
        goes under that name, as in the model file.
    fit : FitResult
    prior_settings : dict
        How the priors were fitted (temperature, grouping, ...).
    validation : dict, optional
        Numbers of :func:`workbench.training.validate.validate_against_teacher`.

    Returns
    -------
    dict
        JSON-able.
    """
    history = fit.history
    architecture = architecture_of_config(config)
    return {
        "protein": protein,
        "model": model_description(prior_settings, architecture),
        "teacher": teacher_metadata,
        "data": {
            "frames": int(data["positions"].shape[0]),
            "frames_sampled_by_a_model": int(sampled_mask(data).sum()),
            "beads": int(data["positions"].shape[1]),
            "temperatures_K": data_temperatures(data),
        },
        "priors": prior_settings,
        "architecture": architecture,
        architecture: config.to_dict(),
        "training": {
            "epochs_run": len(history),
            "best_epoch": fit.best_epoch,
            "stopped_early": fit.stopped_early,
            "stopped_by_time_limit": fit.stopped_by_time,
            "first_val_force_rmse": history[0]["val_force_rmse"] if history else None,
            "val_force_rmse": fit.best_val_force_rmse if history else None,
            "val_energy_rmse": (
                history[fit.best_epoch - 1].get("val_energy_rmse") if history else None
            ),
            "final_learning_rate": history[-1]["learning_rate"] if history else None,
            "force_rmse_units": "kcal/mol/A",
            "energy_rmse": "kcal/mol per frame, the mean error over the validation frames "
            "removed (energies are known up to a constant)",
            "log": epoch_log(history),
        },
        "validation": validation,
    }


def read_model_card(model_path: str | os.PathLike) -> dict:
    """The card next to ``model_path`` (see :func:`card_path`); ``{}`` where it has none."""
    path = card_path(model_path)
    return json.loads(path.read_text()) if path.is_file() else {}


def write_model_card(card: dict, model_path: str | os.PathLike) -> Path:
    """Write ``card`` as JSON next to ``model_path`` (atomically); returns its path."""
    path = card_path(model_path)
    atomic_write_text(path, json.dumps(card, indent=2))
    return path
