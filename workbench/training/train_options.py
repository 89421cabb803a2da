"""The options of one training run that constrain one another, checked when they are made.

Field names are those of ``workbench train``'s options (and of a recipe file's keys);
a :class:`~workbench.settings_error.SettingsError` names the field at fault and any
other field as ``{name}``, for each front end to show by its own name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from workbench.model.architectures import ARCHITECTURES, RESERVED_NAMES, config_from_dict
from workbench.model.network_config import config_mapping
from workbench.settings_error import SettingsError

#: Size options that set the network config's field of the same name (where it has one).
SIZE_OPTIONS = ("hidden", "filters", "blocks", "num_rbf", "cutoff")


def _values(text: str | None) -> tuple[float, ...] | None:
    return None if text is None else tuple(float(t) for t in text.split(",") if t.strip())


@dataclass(frozen=True)
class TrainOptions:
    """What data a training run makes or reads, and the terms and limits of its fit.

    Attributes
    ----------
    data, teacher_start : str or None
        A saved data file; a teacher run whose structures start new teacher data (not
        with ``data``).
    sampler, sampler_start : str or None
        A model whose dynamics add frames; runs whose structures start it.
    sampler_equilibration : int or None
        Steps of the sampler before its first frame.
    sampler_max_force : float
        Largest teacher force (kcal/mol/Å) of a sampled or displaced frame kept.
    select_every : int
        Epochs between selection runs (0: off); ``select_start`` starts their second half.
    select_start : str or None
    ensemble_weight : float
        Weight of the relative-entropy term (0: off).
    online_walkers : int
        Walkers of the model being trained that feed that term (0: off; their own
        settings are checked by `workbench.training.relative_entropy.OnlineSettings`).
    online_start : str or None
        Runs whose structures start half of the walkers.
    reweighting_backoffs : int
        Checks of the sampler frames' reweighting that may halve the learning rate instead
        of ending training (`FitSettings.reweighting_backoffs`; with ``sampler`` and
        ``ensemble_weight`` only).
    grad_clip : float
        Largest gradient norm (0: none).
    weight_average : float
        Decay of the moving average of the weights (0: off).
    dihedral_degree : int or None
        Highest harmonic of the fitted dihedral priors.
    cold, compact, noise : str or None
        Comma lists: temperatures (K) of extra teacher frames from native, fractions of
        the native radius of gyration to squeeze teacher frames to, noise scales (Å).
    noise_fraction : float
        Share of the teacher's frames copied at each noise scale.
    arch : str or None
        Architecture of the network trained, a key of
        :data:`~workbench.model.architectures.ARCHITECTURES` (None: ``"schnet"``, or the
        continued model's own).
    network : str or None
        YAML or JSON mapping of config keys of that architecture (``{hidden: 64, blocks:
        2}``), on its config's defaults; checked by its ``Config.from_dict``.
    hidden, filters, blocks, num_rbf, cutoff : int, int, int, int, float or None
        Sizes that set the config field of the same name (over ``network``'s); one the
        architecture's config lacks is refused.
    """

    data: str | None = None
    teacher_start: str | None = None
    sampler: str | None = None
    sampler_start: str | None = None
    sampler_equilibration: int | None = None
    sampler_max_force: float = 1000.0
    select_every: int = 0
    select_start: str | None = None
    ensemble_weight: float = 0.0
    online_walkers: int = 0
    online_start: str | None = None
    reweighting_backoffs: int = 0
    grad_clip: float = 0.0
    weight_average: float = 0.0
    dihedral_degree: int | None = None
    cold: str | None = None
    compact: str | None = None
    noise: str | None = None
    noise_fraction: float = 0.1
    arch: str | None = None
    network: str | None = None
    hidden: int | None = None
    filters: int | None = None
    blocks: int | None = None
    num_rbf: int | None = None
    cutoff: float | None = None

    def __post_init__(self):
        for check in (self._check_sources, self._check_ensemble_term, self._check_fit,
                      self._check_extra_frames, self._check_network):
            check()

    @property
    def architecture(self) -> str:
        """``arch``, ``"schnet"`` where none is given."""
        return self.arch or "schnet"

    @property
    def network_config(self) -> Any:
        """The config of the network to train (``SchNetConfig``, ``PaiNNConfig``, ...): its
        defaults, then ``network``'s keys, then the size options given."""
        sizes = {name: getattr(self, name) for name in SIZE_OPTIONS
                 if getattr(self, name) is not None}
        return config_from_dict(self.architecture, {**self._network_mapping(), **sizes})

    def _network_mapping(self) -> dict | None:
        """``network`` read as YAML (JSON is YAML), ``{}`` without it; None where it is not
        a mapping (`workbench.model.network_config.config_mapping`)."""
        return config_mapping(self.network)

    @property
    def cold_temperatures(self) -> tuple[float, ...] | None:
        """``cold`` as kelvin values."""
        return _values(self.cold)

    @property
    def compact_fractions(self) -> tuple[float, ...] | None:
        """``compact`` as fractions of the native radius of gyration."""
        return _values(self.compact)

    @property
    def noise_scales(self) -> tuple[float, ...] | None:
        """``noise`` as Å."""
        return _values(self.noise)

    def _check_sources(self) -> None:
        if self.sampler_start is not None and self.sampler is None:
            raise SettingsError("sampler_start",
                                "gives the {sampler}'s starting structures: add {sampler}")
        if self.teacher_start is not None and self.data is not None:
            raise SettingsError("teacher_start",
                                "starts new teacher runs: use it with {generate}")
        if self.select_start is not None and self.select_every <= 0:
            raise SettingsError("select_start", "gives the {select_every} runs' starting "
                                "structures: add {select_every}")
        if self.sampler_equilibration is not None and self.sampler_equilibration < 0:
            raise SettingsError("sampler_equilibration",
                                f"must be >= 0, got {self.sampler_equilibration}")
        if not self.sampler_max_force > 0:
            raise SettingsError("sampler_max_force",
                                f"must be positive, got {self.sampler_max_force}")

    def _check_ensemble_term(self) -> None:
        if self.ensemble_weight > 0 and self.sampler is None and self.online_walkers <= 0:
            raise SettingsError("ensemble_weight", "compares the teacher's frames with a "
                                "model's: add {sampler} or {online_walkers}")
        if self.online_walkers > 0 and self.ensemble_weight <= 0:
            raise SettingsError("online_walkers",
                                "feeds the relative-entropy term: add {ensemble_weight}")
        if self.reweighting_backoffs < 0:
            raise SettingsError("reweighting_backoffs",
                                f"must be >= 0, got {self.reweighting_backoffs}")
        if self.reweighting_backoffs > 0 and (
            self.sampler is None or self.ensemble_weight <= 0 or self.online_walkers > 0
        ):
            raise SettingsError("reweighting_backoffs", "acts on the check of the {sampler}'s "
                                "reweighted frames: use it with {sampler} and "
                                "{ensemble_weight}, without {online_walkers}")
        if self.online_start is not None and self.online_walkers <= 0:
            raise SettingsError("online_start",
                                "gives the walkers' starting structures: add {online_walkers}")

    def _check_fit(self) -> None:
        if not (self.grad_clip >= 0 and math.isfinite(self.grad_clip)):
            raise SettingsError("grad_clip", f"must be a finite norm >= 0, got {self.grad_clip}")
        if not 0.0 <= self.weight_average < 1.0:
            raise SettingsError("weight_average", f"must lie in [0, 1), got {self.weight_average}")
        if self.weight_average > 0 and self.ensemble_weight > 0 and self.online_walkers <= 0:
            raise SettingsError("weight_average", "goes with {online_walkers}, not with "
                                "{sampler}'s term (its reweighting check restores raw weights)")
        if self.dihedral_degree is not None and self.dihedral_degree < 1:
            raise SettingsError("dihedral_degree",
                                f"must be at least 1, got {self.dihedral_degree}")

    def _check_extra_frames(self) -> None:
        for name in ("cold", "compact", "noise"):
            try:
                values = _values(getattr(self, name))
            except ValueError:
                values = ()
            if values is not None and not values:
                raise SettingsError(name, f"must be a comma list of numbers, got "
                                    f"{getattr(self, name)!r}")
        if self.cold is not None and not all(t > 0 for t in self.cold_temperatures):
            raise SettingsError("cold", f"temperatures must be positive, got {self.cold}")
        if self.compact is not None and not all(0.0 < f <= 1.0 for f in self.compact_fractions):
            raise SettingsError("compact", f"fractions must lie in (0, 1], got {self.compact}")
        if self.noise is not None and not all(s > 0.0 and math.isfinite(s)
                                              for s in self.noise_scales):
            raise SettingsError("noise", f"scales must be positive Å, got {self.noise}")
        if not 0.0 < self.noise_fraction <= 1.0:
            raise SettingsError("noise_fraction", f"must lie in (0, 1], got {self.noise_fraction}")

    def _check_network(self) -> None:
        name = self.architecture
        if name in RESERVED_NAMES or name not in ARCHITECTURES:
            raise SettingsError("arch", f"must be one of {', '.join(sorted(ARCHITECTURES))}, "
                                f"got {name!r}")
        keys = [f.name for f in fields(ARCHITECTURES[name].config_class())]
        for size in SIZE_OPTIONS:
            if getattr(self, size) is not None and size not in keys:
                raise SettingsError(size, f"is not a size of {name} (its config keys: "
                                    f"{', '.join(keys)}; give them with {{network}})")
        given = self._network_mapping()
        if given is None:
            raise SettingsError("network", f"must be a mapping of {name}'s config keys "
                                f"(YAML or JSON), got {self.network!r}")
        try:
            config_from_dict(name, given)
        except ValueError as error:
            raise SettingsError("network", f": {error} (the {name} config keys: "
                                f"{', '.join(keys)})") from None
