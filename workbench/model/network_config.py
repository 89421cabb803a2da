"""The plain-JSON form shared by the network configs (`SchNetConfig`, `PaiNNConfig`, ...)."""

from __future__ import annotations

from dataclasses import asdict
from typing import ClassVar

import yaml
from torch import nn

#: Activations a network config may name (mlcg's names).
ACTIVATIONS = {"tanh": nn.Tanh, "silu": nn.SiLU, "softplus": nn.Softplus, "gelu": nn.GELU}


class NetworkConfig:
    """Mixin of a network's config dataclass: ``to_dict``, its strict inverse, and the
    check of the ``activation`` every network config names (against `ACTIVATIONS`).

    Subclasses are dataclasses and set ``label``, the network's name in error messages.
    """

    label: ClassVar[str] = "network"

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; choose from "
                             f"{sorted(ACTIVATIONS)}")

    def to_dict(self) -> dict:
        """Plain-JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict):
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown {cls.label} config keys: {sorted(unknown)}")
        return cls(**data)


def config_mapping(text: str | None) -> dict | None:
    """Config keys written as a YAML mapping (JSON is YAML), as ``--network`` takes them:
    ``{}`` for None or an empty text, None where the text is not a mapping."""
    try:
        given = yaml.safe_load(text) if text else {}
    except yaml.YAMLError:
        return None
    return given if isinstance(given, dict) else None
