"""Set up and run a simulation from plain settings (used by the CLI and the workbench UI).

On a CPU the process is set up first (:func:`configure_cpu_process`): intra-op threads and
the C allocator's thresholds. A CPU step allocates and frees many temporaries of about a
megabyte (the PyTorch tables path works in chunks sized to a core's L2 cache). With
glibc's default, dynamic thresholds the freed top of the heap is returned to the system
and taken back at the next step, so each step pays page faults and the kernel's zeroing of
the pages: CLN025 x 8 on one core measured 270 to 2,800 minor faults per step and 415-570
timestep·mol/s, against none and 577-596 with the thresholds fixed (`keep_freed_memory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from workbench.md import LangevinIntegrator, NeighborSettings, Simulation
from workbench.md.tempering import ReplicaExchange, geometric_ladder
from workbench.model.architectures import (
    ARCHITECTURES,
    RESERVED_NAMES,
    config_from_dict,
    fused_techniques,
)
from workbench.model.deep_potential import DP_BACKENDS
from workbench.model.deepmd_interop import deepmd_backend_problem, deepmd_potential, is_deepmd_file
from workbench.model.force_paths import network_name, settle_options
from workbench.model.io import ForeignModelError, load_potential
from workbench.model.native_priors import demo_config, demo_potential
from workbench.model.options import KernelOptions
from workbench.model.potential import Potential
from workbench.model.tensor_product import TP_BACKENDS, UNCAPTURED_TP_BACKENDS, backend_problem
from workbench.model_fit import bundled_match, check_model_fits
from workbench.models import shipped_model_file, shipped_model_path
from workbench.run_folder import MANIFEST
from workbench.settings_error import SettingsError
from workbench.system import build_system
from workbench.system.cg_system import CGSystem
from workbench.teacher import mixed_starts, teacher_potential
from workbench.units import FS_PER_PS, ns_per_day

#: What a run writes in its folder (files and the ``trajectory`` folder); ``exchanges.csv``
#: only with a temperature ladder, whose exchange state is saved in the checkpoint.
RUN_FILES = (MANIFEST, "metrics.csv", "checkpoint.pt", "summary.json", "exchanges.csv",
             "trajectory")


@dataclass
class RunSettings:
    """Everything a run needs, in user units.

    Attributes
    ----------
    protein : str
        Bundled name or PDB path.
    replicas : int
    steps : int
    temperature : float
        Kelvin (not used with a ``ladder``).
    ladder : tuple of (float, float, int) or None
        ``(lowest K, highest K, levels)`` of a geometric temperature ladder for parallel
        tempering (replicas = levels × walkers); None: every replica at ``temperature``.
    exchange_every : int
        Steps between replica-exchange rounds (with a ``ladder``).
    timestep_fs : float
    friction : float
        1/ps.
    save_interval : int
        Steps between metric rows and trajectory frames.
    seed : int
    device : str
        ``"auto"``, ``"cpu"`` or ``"cuda[:i]"``.
    model : str or None
        Path of a saved potential, a published CGSchNet (mlcg) checkpoint or a deepmd-kit
        se_e2_a model (``.pt`` checkpoint or frozen ``.pth``; its network with the
        protein's native priors, `workbench.model.deepmd_interop.deepmd_potential`),
        ``"demo"`` for the untrained demo model; None: the shipped model, else the demo
        model.
    architecture : str or None
        The network: a key of `workbench.model.architectures.ARCHITECTURES` (``"schnet"``,
        ``"painn"``, ``"egnn"``, ``"nequip"``, ``"dp"``). The untrained demo model is built with
        it (default sizes, the same priors); a model file or checkpoint must hold a network of it
        (`check_architecture`); the shipped model (the protein's line of it where one ships,
        `workbench.models.shipped_model_file`) is used only when it does. None: the
        network a model file holds, CGSchNet for the demo model.
    tp_backend : str
        Convolution backend of a tensor-product network (``"e3nn"``,
        ``"openequivariance"``, ``"cuequivariance"``; `workbench.model.tensor_product`);
        where it cannot run, or for another network, a notice says so and the e3nn
        reference path (or the network's own) runs.
    dp_backend : str
        Who evaluates a Deep Potential (`workbench.model.deep_potential.DP_BACKENDS`):
        ``"engine"``, or ``"deepmd"`` (deepmd-kit's own model of the same weights; a
        converted deepmd-kit model and deepmd-kit installed, else a notice says so and the
        engine's path runs).
    structures : str or None
        mlcg ``*_configurations.pt`` with starting structures for an mlcg model.
    mapping : str
    options : KernelOptions
    neighbors : NeighborSettings
    first_replica : int
        Index of this run's first replica in a larger ensemble of which it is one shard
        (``workbench.distributed``): replica r starts from structure
        ``(first_replica + r) mod`` the number of ``structures``.
    denatured_fraction : float
        Share of this run's replicas, in [0, 1], that start from denatured structures
        (the last ``round(denatured_fraction * replicas)``; the others start native), to
        watch folding as well as unfolding. Not with an mlcg model, whose structures are
        its own.
    denature_steps : int
        Steps of the chain without contact wells (`workbench.teacher.mixed_starts`, at
        ``temperature``) that make the denatured structures.
    network : dict or None
        Config keys of the demo model's network (``model`` :data:`DEMO_MODEL` only), the
        architecture's demo config for the others (`workbench.model.native_priors.demo_config`):
        ``{"irreps": "32x0e + 32x1o", "radial_width": 32}`` times a NequIP of a recipe's
        size. None: the demo config.
    """

    protein: str = "cln025"
    replicas: int = 8
    steps: int = 1000
    temperature: float = 300.0
    ladder: tuple[float, float, int] | None = None
    exchange_every: int = 100
    timestep_fs: float = 4.0
    friction: float = 1.0
    save_interval: int = 100
    seed: int = 0
    device: str = "auto"
    model: str | None = None
    architecture: str | None = None
    tp_backend: str = "e3nn"
    dp_backend: str = "engine"
    structures: str | None = None
    mapping: str = "five-bead"
    options: KernelOptions = field(default_factory=KernelOptions)
    neighbors: NeighborSettings = field(default_factory=NeighborSettings)
    first_replica: int = 0
    denatured_fraction: float = 0.0
    denature_steps: int = 25_000
    network: dict | None = None

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise `SettingsError` naming the field of an impossible setting."""
        if self.replicas < 1:
            raise SettingsError("replicas", f"must be at least 1, got {self.replicas}")
        if self.steps < 0:
            raise SettingsError("steps", f"must be non-negative, got {self.steps}")
        if not 0 < self.temperature < math.inf:
            raise SettingsError("temperature", f"must be positive (kelvin), got {self.temperature}")
        if not 0 < self.timestep_fs < math.inf:
            raise SettingsError("timestep_fs", f"must be positive (fs), got {self.timestep_fs}")
        if not 0 <= self.friction < math.inf:
            raise SettingsError("friction", f"must be non-negative (1/ps), got {self.friction}")
        if not 0 <= self.neighbors.skin < math.inf:
            raise SettingsError("skin", f"must be a non-negative distance (Å), got "
                                f"{self.neighbors.skin}")
        if self.save_interval < 1:
            raise SettingsError("save_interval", f"must be at least 1, got {self.save_interval}")
        if self.first_replica < 0:
            raise SettingsError("first_replica", f"must be non-negative, got {self.first_replica}")
        if self.architecture is not None and (self.architecture in RESERVED_NAMES
                                              or self.architecture not in ARCHITECTURES):
            raise SettingsError("architecture", f"must be one of {', '.join(ARCHITECTURES)}, "
                                f"got {self.architecture!r}")
        if self.tp_backend not in TP_BACKENDS:
            raise SettingsError("tp_backend", f"must be one of {', '.join(TP_BACKENDS)}, got "
                                f"{self.tp_backend!r}")
        if self.dp_backend not in DP_BACKENDS:
            raise SettingsError("dp_backend", f"must be one of {', '.join(DP_BACKENDS)}, got "
                                f"{self.dp_backend!r}")
        if self.network is not None:
            if self.model != DEMO_MODEL:
                raise SettingsError("network", f"sets the demo model's network only (model "
                                    f"{DEMO_MODEL!r}), got model {self.model!r}")
            architecture = self.architecture or "schnet"
            try:
                config_from_dict(architecture, dict(self.network))
            except (TypeError, ValueError) as error:
                raise SettingsError("network", f"is not a {architecture} config: {error}") \
                    from None
        if self.structures is not None and self.model is None:
            raise SettingsError("structures", "needs {model} (an mlcg checkpoint)")
        if not 0.0 <= self.denatured_fraction <= 1.0:
            raise SettingsError("denatured_fraction",
                                f"must be in [0, 1], got {self.denatured_fraction}")
        if self.denature_steps < 1:
            raise SettingsError("denature_steps", f"must be at least 1, got {self.denature_steps}")
        if self.exchange_every < 1:
            raise SettingsError("exchange_every", f"must be at least 1, got {self.exchange_every}")
        if self.ladder is not None:
            try:
                geometric_ladder(*self.ladder)
            except ValueError as exc:
                raise SettingsError("ladder", f": {exc}") from exc
            levels = self.ladder[2]
            if self.replicas % levels:
                raise SettingsError(
                    "replicas", f"{self.replicas} is not a multiple of the {levels} ladder "
                    "levels (replicas = levels × walkers)"
                )


@dataclass(frozen=True)
class NetworkBackends:
    """A network's run-time backends: who evaluates it (or a part of it), a switch of the
    network that one `RunSettings` field sets.

    Attributes
    ----------
    architecture : str
        The network's architecture (``"nequip"``).
    setting : str
        The `RunSettings` field (``"tp_backend"``); its default is the network's default
        backend, and a benchmark record names the backend that ran under this key and the
        one asked for under ``setting + "_requested"``.
    choices : tuple of str
        The backends (`workbench.model.tensor_product.TP_BACKENDS`, ...).
    role : str
        What the backend is, in messages (``"convolution backend"``).
    subject : str
        How a message names the switch (``"Tensor-product backend"``).
    label : str
        The switch's short name, for a selector (``"TP backend"``).
    problem : callable
        ``problem(network, backend, device)``: why ``backend`` cannot evaluate ``network``
        on ``device``, or None if it can.
    unnamed : str or None
        The backend that a benchmark's network label leaves out, the engine's own path
        (``"dp"``, not ``"dp/engine"``); None: labels name every backend.
    packages : dict of str to str
        The backends that evaluate the network with another package's model, and the
        package (``{"deepmd": "deepmd-kit"}``): the engine's own techniques of the network
        do not apply to them (`settle_options`).
    uncaptured : dict of str to str
        The backends whose steps are not captured (``cuda_graph`` is switched off with them,
        `settle_options`), each with the reason the notice gives.
    """

    architecture: str
    setting: str
    choices: tuple[str, ...]
    role: str
    subject: str
    label: str
    problem: Callable[[torch.nn.Module, str, torch.device], str | None]
    unnamed: str | None = None
    packages: dict[str, str] = field(default_factory=dict)
    uncaptured: dict[str, str] = field(default_factory=dict)

    @property
    def default(self) -> str:
        """The backend a run gets when none is asked for (the `RunSettings` default)."""
        return RunSettings.__dataclass_fields__[self.setting].default

    def settle_options(self, backend: str, options: KernelOptions) -> str | None:
        """Switch off, in place, what of ``options`` the network does not run on
        ``backend``: another package's model (`packages`) runs none of the engine's own
        techniques of the network (`workbench.model.architectures.fused_techniques`: its
        kernels, tables and captured steps) nor its 16-bit networks; the MD step's own
        stay. A backend of `uncaptured` runs without ``cuda_graph``. Returns the notice for
        the user, or None where nothing was switched off."""
        if backend in self.uncaptured:
            if not options.cuda_graph:
                return None
            options.cuda_graph = False
            return (f"{self.subject} {backend!r}: cuda_graph is switched off "
                    f"({self.uncaptured[backend]}).")
        if backend not in self.packages:
            return None
        dropped = [name for name in fused_techniques(self.architecture)
                   if getattr(options, name)]
        for name in dropped:
            setattr(options, name, False)
        if options.mlp_precision != "fp32":
            dropped.append(f"mlp_precision={options.mlp_precision}")
            options.mlp_precision = "fp32"
        if not dropped:
            return None
        return (f"{self.subject} {backend!r}: {self.packages[backend]}'s model runs, so the "
                f"engine's {', '.join(dropped)} {'is' if len(dropped) == 1 else 'are'} "
                "switched off.")


def _convolution_problem(network, backend: str, device: torch.device) -> str | None:
    return backend_problem(backend, device)


def _evaluator_problem(network, backend: str, device: torch.device) -> str | None:
    return deepmd_backend_problem(network) if backend == "deepmd" else None


#: The architectures with run-time backends (`NetworkBackends`), by name.
NETWORK_BACKENDS = {backends.architecture: backends for backends in (
    NetworkBackends("nequip", "tp_backend", TP_BACKENDS, "convolution backend",
                    "Tensor-product backend", "TP backend", _convolution_problem,
                    uncaptured=UNCAPTURED_TP_BACKENDS),
    NetworkBackends("dp", "dp_backend", DP_BACKENDS, "evaluator", "Deep Potential backend",
                    "DP backend", _evaluator_problem, unnamed="engine",
                    packages={"deepmd": "deepmd-kit"}),
)}


def backends_of(backend: str) -> NetworkBackends:
    """The backends (`NETWORK_BACKENDS`) that ``backend`` is one of.

    Raises
    ------
    ValueError
        A backend of no network.
    """
    for backends in NETWORK_BACKENDS.values():
        if backend in backends.choices:
            return backends
    known = "; ".join(f"{', '.join(b.choices)} ({b.architecture})"
                      for b in NETWORK_BACKENDS.values())
    raise ValueError(f"unknown network backend {backend!r}; choose from {known}")


def resolve_device(device: str) -> tuple[torch.device, str | None]:
    """Pick the device; returns it and a notice to show the user (or None)."""
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda"), None
        return torch.device("cpu"), "No GPU found: running on the CPU."
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SettingsError("device", f"{device!r} was asked for but no CUDA GPU is available")
    return dev, None


#: ``RunSettings.model`` value that asks for the untrained demo model (random CGSchNet plus
#: native-centred priors and contact wells: keeps a protein near its native edge count,
#: which is what the benchmark protocol measures).
DEMO_MODEL = "demo"
#: ``RunSettings.model`` value that asks for the protein's structure-based teacher (the
#: reference the trained models are validated against; a classical, prior-only potential).
TEACHER_MODEL = "teacher"


#: Fields of a teacher variant (``teacher:KEY=VALUE,...``): their `teacher_potential`
#: argument, the smallest value allowed and whether the value is an integer.
TEACHER_FIELDS = {"eps": ("epsilon", "positive", False),
                  "dihedral": ("dihedral_ratio", "positive", False),
                  "separation": ("contact_separation", "positive", True),
                  "barrier": ("contact_barrier", "non-negative", False)}


def teacher_variant(model: str | None) -> dict | None:
    """The `teacher_potential` arguments of a ``"teacher:KEY=VALUE,..."`` model name, else
    None.

    Keys (`TEACHER_FIELDS`): ``eps`` the contact depth ε (kcal/mol), ``dihedral`` the
    dihedral strength as a multiple of ε, ``separation`` the smallest residue separation
    of a contact, ``barrier`` the height of each contact's desolvation barrier as a
    multiple of ε. These are the variants to calibrate in long runs, for example
    ``teacher:eps=0.3,barrier=0.5``.

    Raises ValueError naming the field that is unknown, repeated or not a positive
    number (``separation``: a positive integer; ``barrier`` may be 0).
    """
    prefix = TEACHER_MODEL + ":"
    if model is None or not model.startswith(prefix):
        return None
    out = {}
    for item in model[len(prefix):].split(","):
        key, _, text = item.partition("=")
        if key not in TEACHER_FIELDS or TEACHER_FIELDS[key][0] in out:
            raise ValueError(f"--model {model}: {key!r} is not a field of a teacher variant "
                             f"(or is given twice); use {', '.join(TEACHER_FIELDS)}, e.g. "
                             f"teacher:eps=0.3,barrier=0.5")
        argument, lowest, integer = TEACHER_FIELDS[key]
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        in_range = value > 0 or (lowest == "non-negative" and value == 0)
        if not (in_range and math.isfinite(value)) or (integer and value != int(value)):
            kind = "integer" if integer else "number"
            raise ValueError(f"--model {model}: {key} must be a {lowest} {kind}, got {text!r}")
        out[argument] = int(value) if integer else value
    return out


def _variant_note(teacher: Potential) -> str:
    meta = teacher.metadata
    notes = [(meta["dihedral_ratio"], "dihedral strength {:g} ε"),
             (meta["contact_separation"], "contacts {}+ residues apart"),
             (meta["contact_barrier"], "desolvation barriers {:g} ε")]
    return "".join(", " + text.format(value) for value, text in notes if value is not None)


def check_architecture(potential: Potential, architecture: str | None, model: str) -> None:
    """Refuse a model whose network is not of ``architecture`` (a prior-only model, such
    as the teacher, has none and passes; ``architecture`` None accepts any).

    Raises
    ------
    SettingsError
        On the ``architecture`` field, naming the file's architecture.
    """
    found = potential.architecture
    if None not in (found, architecture) and found != architecture:
        raise SettingsError(
            "architecture", f"is {architecture!r}, but the model {model} holds a {found!r} "
            f"network ({network_name(found)}); set {{architecture}} to {found!r} to run it")


def choose_potential(
    system: CGSystem, model: str | None, architecture: str | None = None,
    network: dict | None = None,
) -> tuple[Potential, str | None]:
    """The potential for a run and a notice about it (None for a model file given).

    ``model``: a file, :data:`DEMO_MODEL` for the untrained demo model,
    :data:`TEACHER_MODEL` for the protein's teacher (a variant: `teacher_variant`), or None
    for the shipped model of the bundled protein with the system's sequence (its line of
    ``architecture`` where one ships, `workbench.models.shipped_model_file`; the demo model
    where there is none, it has not passed its validation or its network is not of
    ``architecture``). A model file made for another system is refused
    (`check_model_fits`), and so is one whose network is not of ``architecture``
    (`check_architecture`); the demo model is a network of ``architecture`` (CGSchNet for
    None, which also accepts a model of any network), its demo config with the keys of
    ``network`` set.
    """
    variant = teacher_variant(model)
    if model == TEACHER_MODEL or variant is not None:
        teacher = teacher_potential(system, **(variant or {}))
        return teacher, (
            f"Structure-based teacher of {system.name} (ε {teacher.metadata['epsilon']:g} "
            f"kcal/mol{_variant_note(teacher)}): the classical reference the trained models "
            "are validated against."
        )
    if model is not None and model != DEMO_MODEL and is_deepmd_file(model):
        potential = deepmd_potential(model, system)
        check_architecture(potential, architecture, model)
        return potential, (
            f"deepmd-kit model {model}: its Deep Potential (types "
            f"{', '.join(potential.metadata['type_map'])}) with the native priors of "
            f"{system.name}.")
    if model is not None and model != DEMO_MODEL:
        potential = load_potential(model)
        check_architecture(potential, architecture, model)
        check_model_fits(potential, system, model)
        return potential, None
    # the shipped model of the bundled protein with this sequence, whatever the file's name
    protein = bundled_match(system) if model is None else None
    shipped = (None if protein is None
               else shipped_model_path(protein, system.mapping, architecture))
    other_network = None
    if shipped is not None:
        potential = load_potential(shipped)
        if architecture is None or potential.architecture in (None, architecture):
            return potential, (
                f"Trained model shipped for {protein}, validated against its teacher "
                f"(model card: {shipped.with_suffix('.json')})."
            )
        other_network = potential.architecture
    architecture = architecture or "schnet"
    config = demo_config(system, architecture)
    if network:
        config = config_from_dict(architecture, {**config.to_dict(), **network})
    potential = demo_potential(system, config, architecture=architecture)
    name = network_name(architecture)
    notice = (
        f"Untrained demo model: random {name} weights plus priors and native-contact wells "
        f"fitted to the native structure of {system.name}. Its {name} term is not trained; "
        "use --model for a trained potential."
    )
    if other_network is not None:
        notice += (f" The model shipped for {protein} ({shipped}) is a {other_network!r} "
                   f"network, not {architecture!r}.")
    unvalidated = (None if protein is None
                   else shipped_model_file(protein, system.mapping, architecture))
    if unvalidated is not None and other_network is None:
        notice += (
            f" A trained model ships ({unvalidated}) but has not passed its validation "
            "against its teacher (see its card); run it with --model."
        )
    return potential, notice


@dataclass
class PreparedRun:
    """A ready simulation with what the user should be told about it.

    ``tempering`` drives the simulation when the settings have a temperature ladder;
    ``backend_notices`` holds, by `NetworkBackends.setting`, what the user is told about
    the network's backend (one that cannot run, techniques it switched off), also among
    ``notices``.
    """

    settings: RunSettings
    system: CGSystem
    simulation: Simulation
    notices: list[str]
    tempering: ReplicaExchange | None = None
    backend_notices: dict[str, str] = field(default_factory=dict)

    def advance(self, steps: int) -> None:
        """Step the run ``steps`` steps, through the replica exchange if there is one."""
        if self.tempering is not None:
            self.tempering.run(steps)
        else:
            self.simulation.step(steps)


def _imported_model(settings: RunSettings):
    """System, potential and starting positions of an mlcg checkpoint, or None if not one."""
    if settings.model in (None, DEMO_MODEL, TEACHER_MODEL) or teacher_variant(settings.model):
        return None
    if settings.structures is None:
        try:
            load_potential(settings.model)
            return None
        except ForeignModelError:  # perhaps mlcg's or deepmd-kit's; a damaged model is reported
            if is_deepmd_file(settings.model):
                return None
    from workbench.model.mlcg_import import load_for_run

    system, potential, starts = load_for_run(settings.model, settings.structures)
    first = settings.first_replica
    positions = starts[torch.arange(first, first + settings.replicas) % starts.shape[0]]
    return system, potential, positions


def _listed(items: list[str], most: int = 6) -> str:
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return "; ".join(items[:most]) + more


def structure_notices(system: CGSystem) -> list[str]:
    """What reading the structure file changed or could not find: residues read as
    standard ones (by MODRES or a built-in mapping) and missing side-chain atoms."""
    notices = []
    modified = system.metadata.get("modified_residues") or {}
    if modified:
        notices.append("Residues read as standard ones: " + _listed(
            [f"{label} as {how}" for label, how in modified.items()]) + ".")
    missing = system.metadata.get("missing_heavy_atoms") or {}
    if missing:
        notices.append("Side-chain atoms missing from the structure (its native contacts "
                       "leave them out): " + _listed(
                           [f"{label}: {', '.join(atoms)}" for label, atoms in missing.items()])
                       + ".")
    return notices


def prepare_run(settings: RunSettings) -> PreparedRun:
    """Validate settings, build system, potential and simulation."""
    settings.validate()
    device, device_notice = resolve_device(settings.device)
    imported = _imported_model(settings)
    positions = None
    neighbors = settings.neighbors
    if imported is not None:
        if settings.denatured_fraction:
            raise ValueError("--denatured-fraction does not apply to an mlcg model: its "
                             "configurations are the starting structures")
        system, potential, positions = imported
        check_architecture(potential, settings.architecture, settings.model)
        network = {"schnet": "CGSchNet", "painn": "PaiNN"}.get(potential.architecture, "mlcg")
        model_notice = (
            f"Published {network} checkpoint {settings.model}: the system comes from its "
            "configurations (--protein and --mapping are ignored); replica r starts from "
            "structure r mod the number of structures."
        )
        if system.metadata.get("exclude_bonded"):
            neighbors = replace(neighbors, exclude_bonded=True)
    else:
        system = build_system(settings.protein, mapping=settings.mapping)
        potential, model_notice = choose_potential(system, settings.model, settings.architecture,
                                                   settings.network)
        denatured = round(settings.denatured_fraction * settings.replicas)
        if denatured:
            positions = mixed_starts(system, settings.temperature, settings.replicas, denatured,
                                     settings.denature_steps, device, settings.seed)
    if device.type == "cpu":  # threads first: the path's notice names them
        tables = settings.options.tabulated_filter and potential.schnet is not None
        configure_cpu_process(beads=settings.replicas * system.n_beads if tables else None)
    dp_notice = choose_dp_backend(potential, settings.dp_backend, settings.options)
    path_notices = settle_options(settings.options, device, potential.network)
    backend_notice = choose_tp_backend(potential, settings.tp_backend, device,
                                       settings.options)
    # what the run reports is what runs, as for the kernel options
    for architecture, backends in NETWORK_BACKENDS.items():
        setattr(settings, backends.setting, potential.network.backend
                if potential.architecture == architecture else backends.default)
    integrator = LangevinIntegrator(
        settings.timestep_fs / FS_PER_PS, settings.friction, settings.temperature
    )
    sim = Simulation(
        system,
        potential,
        integrator,
        replicas=settings.replicas,
        positions=positions,
        device=device,
        seed=settings.seed,
        options=settings.options,
        neighbors=neighbors,
    )
    notices = [
        n for n in (device_notice, model_notice, *structure_notices(system),
                    copies_notice(system, potential, neighbors.skin)) if n
    ] + path_notices + [n for n in (backend_notice, dp_notice) if n] + settle_large_system(sim)
    tempering = None
    if settings.ladder is not None:
        tempering = ReplicaExchange(
            sim, geometric_ladder(*settings.ladder), settings.exchange_every
        )
        ladder = ", ".join(f"{t:.0f}" for t in tempering.temperatures.tolist())
        notices.append(
            f"Parallel tempering: {tempering.levels} levels ({ladder} K) × {tempering.walkers} "
            f"walkers, exchanges every {tempering.exchange_every} steps; --temperature is not used."
        )
    backend_notices = {setting: notice for setting, notice in (
        ("tp_backend", backend_notice), ("dp_backend", dp_notice)) if notice}
    return PreparedRun(settings, system, sim, notices, tempering, backend_notices)


def copies_notice(system: CGSystem, potential: Potential, skin: float) -> str | None:
    """What the run's forces and metrics mean for a system of several copies of a protein
    (`workbench.system.copies`), and whether copies start within the network's reach of
    each other; None for one protein."""
    if system.copies == 1:
        return None
    across = "nothing acts across copies"
    if potential.network is not None:
        across = "the network acts across copies"
        reach = potential.cutoff + skin
        if system.metadata.get("copy_gap", 0.0) <= reach:
            across += (f" and neighbouring copies start within its cutoff plus skin "
                       f"({reach:g} Å)")
    return (f"{system.copies} copies of {system.name.rpartition('*')[0]} in one system "
            f"({system.n_beads:,} beads): priors act within each copy, {across}; RMSD is the "
            "mean of each copy's own, Q the fraction of all copies' native contacts.")


#: Techniques a system above the dense search's size does not run (`settle_large_system`).
LARGE_SYSTEM_OFF = ("fused_pair_search", "cuda_graph")


def large_system_off(nl, options: KernelOptions) -> dict[str, str]:
    """The switches of ``options`` that a neighbour list ``nl`` above the dense search's
    size (`workbench.neighbors.NeighborList.dense`) cannot run, each with its notice
    (`workbench.neighbors.NeighborList.dense_problem`; decision 0022); empty for other
    lists or where they are off."""
    if nl is None or nl.dense:
        return {}
    return {name: f"{name} off: {nl.dense_problem()}." for name in LARGE_SYSTEM_OFF
            if getattr(options, name)}


def settle_large_system(sim: Simulation) -> list[str]:
    """The neighbour search of a system above the dense search's size: a notice that the
    cell list runs, and `LARGE_SYSTEM_OFF` switched off (in place, in ``sim.options``)
    with the reasons (`large_system_off`); none for other systems."""
    nl = sim.neighbor_list
    if nl is None or nl.dense:
        return []
    notices = [f"Neighbour search: a cell list ({nl.n_beads:,} beads per replica, above "
               f"{nl.cell_list_above:,}; docs/large-systems.md)."]
    for name, notice in large_system_off(nl, sim.options).items():
        setattr(sim.options, name, False)
        notices.append(notice)
    return notices


def choose_tp_backend(potential: Potential, backend: str, device: torch.device,
                      options: KernelOptions | None = None) -> str | None:
    """Set the convolution backend of a tensor-product network; the notice for the user
    when it cannot run on ``device`` (the network keeps the e3nn path), when the network
    is of another kind, or when ``options`` asked for captured steps the backend that runs
    does not take (switched off in place, `NetworkBackends.uncaptured`), else None."""
    if backend == "e3nn" and potential.architecture != "nequip":
        return None
    if potential.architecture != "nequip":
        return (f"Tensor-product backend {backend!r} applies to the nequip network only; "
                f"this run's is {potential.architecture or 'none'}, which runs as it is.")
    problem = backend_problem(backend, device)
    potential.network.backend = backend if problem is None else "e3nn"
    notices = [] if problem is None else [
        f"Tensor-product backend {backend!r} unavailable ({problem}); the e3nn reference "
        "path runs."]
    if options is not None:
        notices.append(NETWORK_BACKENDS["nequip"].settle_options(potential.network.backend,
                                                                 options))
    return " ".join(n for n in notices if n) or None


def choose_dp_backend(potential: Potential, backend: str,
                      options: KernelOptions | None = None) -> str | None:
    """Set who evaluates a Deep Potential (`DP_BACKENDS`); the notice for the user when
    deepmd-kit cannot run it (the engine's path runs), when it runs and the engine's own
    techniques of the network in ``options`` (its tables, descriptor kernel, 16-bit
    networks, captured steps) are switched off in place, or when the network is of another
    kind, else None."""
    if backend == "engine" and potential.architecture != "dp":
        return None
    if potential.architecture != "dp":
        return (f"Deep Potential backend {backend!r} applies to the dp network only; this "
                f"run's is {potential.architecture or 'none'}, which runs as it is.")
    problem = deepmd_backend_problem(potential.network) if backend == "deepmd" else None
    potential.network.backend = backend if problem is None else "engine"
    if problem is not None:
        return (f"Deep Potential backend 'deepmd' unavailable ({problem}); the engine's path "
                "runs.")
    if options is None:
        return None
    return NETWORK_BACKENDS["dp"].settle_options(backend, options)


def existing_run_files(folder: Path) -> list[Path]:
    """Files and folders of an earlier run in ``folder`` that a new run would replace."""
    return [folder / name for name in RUN_FILES if (folder / name).exists()]


class ThroughputMeter:
    """Steps and wall time of a run, with the first chunk treated as warm-up.

    Parameters
    ----------
    replicas : int
    timestep_fs : float
    device : torch.device
    """

    def __init__(self, replicas: int, timestep_fs: float, device: torch.device):
        self.replicas = replicas
        self.timestep_fs = timestep_fs
        self.device = device
        self.chunks: list[tuple[int, float]] = []
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def synchronize(self) -> None:
        """Wait for queued device work (so wall time covers it)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def record(self, steps: int, seconds: float, new_chunk: bool = True) -> None:
        """Add a timed chunk, or add to the last one (``new_chunk`` False: a chunk timed in
        parts, e.g. shown step by step while it runs)."""
        if new_chunk or not self.chunks:
            self.chunks.append((steps, seconds))
        else:
            last_steps, last_seconds = self.chunks[-1]
            self.chunks[-1] = (last_steps + steps, last_seconds + seconds)

    def timestep_mol_per_s(self, skip_warmup: bool = True) -> float:
        """Aggregate throughput, excluding the first chunk when there are several."""
        chunks = self.chunks[1:] if skip_warmup and len(self.chunks) > 1 else self.chunks
        steps = sum(s for s, _ in chunks)
        seconds = sum(t for _, t in chunks)
        return steps * self.replicas / seconds if seconds > 0 else 0.0

    def warmup_overhead_s(self) -> float | None:
        """Seconds the first chunk took beyond the steady rate of the later ones (kernel
        compilation, graph capture, first allocations); None with fewer than two chunks."""
        if len(self.chunks) < 2:
            return None
        steps, seconds = self.chunks[0]
        later_steps = sum(s for s, _ in self.chunks[1:])
        later_seconds = sum(t for _, t in self.chunks[1:])
        return max(0.0, seconds - steps * later_seconds / later_steps)

    def ns_per_day(self) -> float:
        """Aggregate ns/day over all replicas."""
        return ns_per_day(self.timestep_mol_per_s(), self.timestep_fs)

    def peak_memory_gb(self) -> float | None:
        """Peak allocated device memory in GB (None on the CPU)."""
        if self.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.device) / 1e9


def timed_steps(
    sim: Simulation,
    meter: ThroughputMeter,
    steps: int,
    advance: Callable[[int], None] | None = None,
    new_chunk: bool = True,
) -> None:
    """Run ``steps`` steps and record their wall time in ``meter``.

    ``advance(steps)`` steps the run instead of ``sim.step`` when given (e.g.
    :meth:`PreparedRun.advance`, which also exchanges temperatures on a ladder);
    ``new_chunk`` False adds them to the meter's last chunk.
    """
    meter.synchronize()
    start = time.perf_counter()
    (advance or sim.step)(steps)
    meter.synchronize()
    meter.record(steps, time.perf_counter() - start, new_chunk)


#: Beads of all replicas together below which a run on the PyTorch tables path keeps one
#: intra-op thread: each operation of its step then takes tens of µs, as long as starting
#: and joining the threads, and a second core that anything else uses stalls every one of
#: them. CLN025 × 8 (392 beads) on two cores: one thread 535-594 timestep·mol/s; two
#: threads 388-776, as the other core was busy or free. The reference path, whose
#: operations are larger, gains from both cores (96 against 186)
#: (`docs/decisions/0014-one-thread-for-small-table-runs.md`).
ONE_THREAD_BELOW = 2048

#: PyTorch's intra-op threads when this module was imported (before any run set them).
DEFAULT_THREADS = torch.get_num_threads()

#: ``mallopt`` parameters (glibc's malloc.h) and the values a CPU run sets: freed memory
#: stays in the process up to 256 MiB, and blocks below 64 MiB come from the heap.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
TRIM_THRESHOLD, MMAP_THRESHOLD = 256 << 20, 64 << 20


def cpu_threads(beads: int | None = None) -> int:
    """Intra-op threads for a CPU run: PyTorch's default (one per physical core, or
    ``OMP_NUM_THREADS``), but no more than the cores this process may run on
    (``os.sched_getaffinity``, e.g. under ``taskset`` or a container's CPU set), and one
    for a tables run of fewer than `ONE_THREAD_BELOW` ``beads`` (None: not such a run)
    unless ``OMP_NUM_THREADS`` says otherwise."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    threads = min(DEFAULT_THREADS, allowed or DEFAULT_THREADS)
    small = beads is not None and beads < ONE_THREAD_BELOW
    return 1 if small and "OMP_NUM_THREADS" not in os.environ else threads


def keep_freed_memory() -> bool:
    """Fix glibc's trim and mmap thresholds (`TRIM_THRESHOLD`, `MMAP_THRESHOLD`) for this
    process, so that freed temporaries are reused without page faults. Returns whether
    it could (False where the C library has no ``mallopt``: macOS, Windows, musl)."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def configure_cpu_process(beads: int | None = None) -> None:
    """`cpu_threads` intra-op threads and `keep_freed_memory`: what a CPU run sets once.
    ``beads``: all replicas' beads of a run on the PyTorch tables path (None otherwise)."""
    torch.set_num_threads(cpu_threads(beads))
    keep_freed_memory()
