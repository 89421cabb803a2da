"""Import of published mlcg / flashmd checkpoints (docs/mlcg-format.md).

Reads, without mlcg installed,

* ``model_and_prior.pt``: a ``SumOut`` of ``GradientsOut(StandardSchNet)`` or
  ``GradientsOut(StandardPaiNN)`` and priors;
* prior files: a ``ModuleDict`` of ``GradientsOut(<prior>)`` (a prior-only potential);
* ``*_specialized_model_and_config.pt``: a tuple ``(SumOut, configurations)`` whose
  bonded priors are ``Static*`` priors valid for those configurations;
* ``*_configurations.pt``: a list of ``AtomicData`` (starting structures);

through the allow-listed unpickler of :mod:`workbench.model.safe_unpickle`, and
converts them into a :class:`~workbench.model.potential.Potential` (our CGSchNet or
CGPaiNN plus per-term priors for one molecule), a :class:`~workbench.system.CGSystem`
and starting positions.

Conversion rules
----------------
* SchNet: hyper-parameters are read off tensor shapes (§5.1); the basis (Gaussian
  or exp-normal, its exact buffers), the basis and convolution envelopes
  (cosine or identity, lower/upper radii) and the activation must be
  expressible by :class:`~workbench.model.schnet.SchNetConfig`, otherwise the
  file is refused with the reason. The graph radius is the basis cutoff's upper
  value. ``Linear`` biases are taken generically: a bias mlcg lacks is loaded as
  zeros, a bias we lack must be zero.
* PaiNN: the same rules, read into :class:`~workbench.model.painn.PaiNNConfig`
  (§5.4); state-dict keys are mlcg's, so the tensors map 1:1. The interaction
  blocks' envelope plays the part of SchNet's convolution envelope.
* Priors: unspecialised (type-indexed) priors are expanded to one parameter set
  per interaction of the molecule from its ``atom_types`` and the
  ``neighbor_list[name]['index_mapping']`` of its configuration; specialised
  (``Static*``) priors contribute the block of rows that belongs to the first
  configuration. All configurations must be the same molecule. Groups that map
  to the same term class are concatenated (in file order) into one term named
  after the class (``bonds``, ``angles``, ``dihedrals``, ``repulsion``, ...);
  ``potential.metadata['prior_groups']`` lists the mlcg groups of each term.
  Empty groups contribute nothing.
* System: see :func:`system_from_configuration`. Native contacts cannot be derived
  from a coarse-grained configuration, so they are empty and Q is undefined.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from workbench.model.io import ModelFormatError
from workbench.model.painn import CGPaiNN, PaiNNConfig
from workbench.model.potential import Potential
from workbench.model.priors import (
    ConstantEnergy,
    ExpRepulsion,
    FourierDihedrals,
    HarmonicAngles,
    HarmonicBonds,
    HarmonicImpropers,
    HarmonicThetaAngles,
    PriorTerm,
    Repulsion,
)
from workbench.model.safe_unpickle import CheckpointRefused, Record, load_checkpoint
from workbench.model.schnet import CGSchNet, SchNetConfig
from workbench.system.cg_system import CGSystem
from workbench.system.residues import ONE_LETTER, TYPE_ORDER
from workbench.system.topology import bonded_exclusions
from workbench.units import KCAL_TO_AMU_A2_PS2


class MlcgImportError(ModelFormatError):
    """An mlcg / flashmd file that cannot be converted exactly (the message says why)."""


# -- configurations -----------------------------------------------------------------


@dataclass(frozen=True)
class MlcgConfiguration:
    """One ``AtomicData`` of a configurations list.

    Attributes
    ----------
    positions : torch.Tensor, shape (n, 3), float32
        Å.
    atom_types : torch.Tensor, shape (n,), int64
    masses : torch.Tensor, shape (n,), float64
        As stored: amu / 418.4.
    neighbor_lists : dict of str to torch.Tensor
        Group name -> ``index_mapping``, shape (order, m), int64, bead indices
        within this configuration.
    name : str or None
        The ``name`` field, if it is a string.
    exclusions : torch.Tensor or None, shape (2, P), int64
        ``exc_pair_index`` (SchNet-graph exclusions), if present.
    """

    positions: torch.Tensor
    atom_types: torch.Tensor
    masses: torch.Tensor
    neighbor_lists: dict[str, torch.Tensor]
    name: str | None
    exclusions: torch.Tensor | None

    @property
    def n_beads(self) -> int:
        """Number of beads n."""
        return int(self.atom_types.shape[0])

    def same_molecule(self, other: MlcgConfiguration) -> bool:
        """Same bead types and identical neighbor lists."""
        return (
            torch.equal(self.atom_types, other.atom_types)
            and self.neighbor_lists.keys() == other.neighbor_lists.keys()
            and all(
                torch.equal(index, other.neighbor_lists[key])
                for key, index in self.neighbor_lists.items()
            )
        )


def _state(obj: Any) -> dict:
    """The attribute dict of a record (the dict part of a ``(dict, slots)`` state)."""
    state = obj.state if isinstance(obj, Record) else None
    if isinstance(state, tuple):
        state = state[0]
    return state if isinstance(state, dict) else {}


def _class_name(obj: Any) -> str:
    return type(obj).__name__


def _field_mapping(record: Any) -> dict:
    """``AtomicData._store._mapping`` of an AtomicData record."""
    if _class_name(record) != "AtomicData":
        raise MlcgImportError(f"expected AtomicData configurations, found {_class_name(record)}")
    mapping = _state(_state(record).get("_store")).get("_mapping")
    if not isinstance(mapping, dict):
        raise MlcgImportError("an AtomicData record has no field store (_store._mapping)")
    return mapping


def read_configuration(record: Any) -> MlcgConfiguration:
    """Convert one AtomicData record (docs/mlcg-format.md §4).

    Raises
    ------
    MlcgImportError
        Missing ``pos`` / ``atom_types`` / ``masses``, inconsistent shapes, or
        periodic boundaries (not supported).
    """
    fields = _field_mapping(record)
    missing = [k for k in ("pos", "atom_types", "masses") if not torch.is_tensor(fields.get(k))]
    if missing:
        raise MlcgImportError(f"configuration lacks the field(s) {missing}")
    pos = fields["pos"].detach().to(torch.float32).reshape(-1, 3).clone()
    types = fields["atom_types"].detach().to(torch.int64).reshape(-1).clone()
    masses = fields["masses"].detach().to(torch.float64).reshape(-1).clone()
    if not pos.shape[0] == types.shape[0] == masses.shape[0]:
        raise MlcgImportError(
            f"configuration has {pos.shape[0]} positions, {types.shape[0]} atom types and "
            f"{masses.shape[0]} masses"
        )
    pbc = fields.get("pbc")
    if torch.is_tensor(pbc) and bool(pbc.any()):
        raise MlcgImportError("periodic configurations (pbc) are not supported")
    groups = {}
    for key, group in (fields.get("neighbor_list") or {}).items():
        index = group.get("index_mapping") if isinstance(group, dict) else None
        if not torch.is_tensor(index) or index.ndim != 2:
            raise MlcgImportError(f"neighbor list {key!r} has no [order, m] index_mapping")
        groups[str(key)] = index.detach().to(torch.int64).clone()
    exclusions = fields.get("exc_pair_index")
    if torch.is_tensor(exclusions):
        exclusions = exclusions.detach().to(torch.int64).reshape(2, -1).clone()
    name = fields.get("name")
    return MlcgConfiguration(
        positions=pos,
        atom_types=types,
        masses=masses,
        neighbor_lists=groups,
        name=name if isinstance(name, str) else None,
        exclusions=exclusions if torch.is_tensor(exclusions) else None,
    )


def _configurations(obj: Any, source: Path) -> list[MlcgConfiguration]:
    """Configurations from a list of AtomicData or a specialised ``(model, list)`` tuple."""
    if isinstance(obj, tuple) and len(obj) == 2:
        obj = obj[1]
    if not isinstance(obj, list) or not obj:
        raise MlcgImportError(
            f"{source} holds no configurations (expected a non-empty list of AtomicData)"
        )
    return [read_configuration(item) for item in obj]


def _single_molecule(configurations: Sequence[MlcgConfiguration], source: str) -> None:
    first = configurations[0]
    for i, other in enumerate(configurations[1:], start=1):
        if not first.same_molecule(other):
            raise MlcgImportError(
                f"configuration {i} of {source} is not the same molecule as configuration 0 "
                "(bead types or neighbor lists differ); a potential simulates one molecule"
            )


# -- SchNet ---------------------------------------------------------------------------

_ACTIVATIONS = {"Tanh": "tanh", "SiLU": "silu", "Softplus": "softplus", "GELU": "gelu"}
_ACTIVATION_DEFAULTS = {
    "Softplus": {"beta": 1.0, "threshold": 20.0},
    "GELU": {"approximate": "none"},
}


def _child(record: Any, name: str) -> Any:
    child = _state(record).get("_modules", {}).get(name)
    if child is None:
        raise MlcgImportError(f"{_class_name(record)} has no sub-module {name!r}")
    return child


def _children(record: Any) -> list:
    return [m for m in _state(record).get("_modules", {}).values() if m is not None]


def _tensor(record: Any, name: str) -> torch.Tensor | None:
    """A parameter or buffer of a module record, densified, detached, on the CPU."""
    state = _state(record)
    for table in ("_parameters", "_buffers"):
        value = (state.get(table) or {}).get(name)
        if torch.is_tensor(value):
            value = value.detach()
            return value.to_dense() if value.is_sparse else value
    return None


def _required(record: Any, name: str) -> torch.Tensor:
    value = _tensor(record, name)
    if value is None:
        raise MlcgImportError(f"{_class_name(record)} has no tensor {name!r}")
    return value


def _module_tensors(record: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Flat state dict of a module record (parameters and persistent buffers)."""
    state = _state(record)
    skip = state.get("_non_persistent_buffers_set") or set()
    out = {}
    for table in ("_parameters", "_buffers"):
        for name, value in (state.get(table) or {}).items():
            if torch.is_tensor(value) and name not in skip:
                out[prefix + name] = value.detach().to_dense() if value.is_sparse else value
    for name, child in (state.get("_modules") or {}).items():
        if isinstance(child, Record):
            out.update(_module_tensors(child, f"{prefix}{name}."))
    return out


def _cutoff(record: Any) -> tuple[str, float, float]:
    """(kind, lower, upper) of a cutoff record."""
    name = _class_name(record)
    state = _state(record)
    if name == "CosineCutoff":
        return "cosine", float(state["cutoff_lower"]), float(state["cutoff_upper"])
    if name == "IdentityCutoff":
        return (
            "identity",
            float(state.get("cutoff_lower", 0.0)),
            float(state.get("cutoff_upper", math.inf)),
        )
    raise MlcgImportError(f"cutoff {name} is not supported (CosineCutoff or IdentityCutoff)")


def _activation(record: Any) -> str:
    name = _class_name(record)
    if name not in _ACTIVATIONS:
        raise MlcgImportError(
            f"activation {name} is not supported; supported: {', '.join(_ACTIVATIONS)}"
        )
    state = _state(record)
    for attr, default in _ACTIVATION_DEFAULTS.get(name, {}).items():
        if state.get(attr, default) != default:
            raise MlcgImportError(f"{name} with {attr}={state[attr]!r} is not supported")
    return _ACTIVATIONS[name]


def _linear_layers(mlp: Any) -> tuple[list, list[str]]:
    """Linear records and activation names of an mlcg ``MLP`` (Linear, act, ..., Linear)."""
    layers = _children(_child(mlp, "layers"))
    linears = layers[0::2]
    if not layers or any(_class_name(m) != "Linear" for m in linears):
        raise MlcgImportError("an MLP does not alternate Linear layers and activations")
    return linears, [_activation(m) for m in layers[1::2]]


def _embedding(record: Any) -> tuple[int, int]:
    """(embedding size, H) of a network record's ``embedding_layer``."""
    embedding = _child(record, "embedding_layer")
    if _state(embedding).get("max_norm") is not None:
        raise MlcgImportError("an embedding with max_norm is not supported")
    embedding_size, hidden = _required(embedding, "weight").shape
    return int(embedding_size), int(hidden)


def _radial(rbf: Any, block_cutoffs: list, target: str) -> dict:
    """Basis, envelopes and radii of a network (§5.1, §6) as config fields.

    Parameters
    ----------
    rbf : Record
        The ``rbf_layer``.
    block_cutoffs : list of Record
        The envelope of each block's filter.
    target : str
        Name of the config class, for messages.
    """
    basis = {"GaussianBasis": "gaussian", "ExpNormalBasis": "exp-normal"}.get(_class_name(rbf))
    if basis is None:
        raise MlcgImportError(
            f"radial basis {_class_name(rbf)} is not supported (GaussianBasis or ExpNormalBasis)"
        )
    basis_kind, basis_lower, cutoff = _cutoff(_child(rbf, "cutoff"))
    if not math.isfinite(cutoff):
        raise MlcgImportError("the basis cutoff has no finite upper value (no graph radius)")
    conv_cutoffs = {_cutoff(c) for c in block_cutoffs}
    if len(conv_cutoffs) != 1:
        raise MlcgImportError(f"interaction blocks use different cutoffs: {sorted(conv_cutoffs)}")
    ((conv_kind, conv_lower, conv_upper),) = conv_cutoffs
    if conv_kind == "cosine" and conv_upper != cutoff:
        raise MlcgImportError(
            f"the convolution cutoff ends at {conv_upper} Å but the basis cutoff (graph radius) "
            f"at {cutoff} Å; {target} uses one radius for both"
        )
    lowers = {conv_lower} if conv_kind == "cosine" else set()
    if basis_kind == "cosine" or basis == "exp-normal":
        lowers.add(basis_lower)
    if len(lowers) > 1:
        raise MlcgImportError(
            f"basis and convolution envelopes use different lower cutoffs {sorted(lowers)}; "
            f"{target} has one cutoff_lower"
        )
    cutoff_lower = lowers.pop() if lowers else 0.0
    if basis == "exp-normal":
        alpha = float(_state(rbf)["alpha"])
        if not math.isclose(alpha, 5.0 / (cutoff - cutoff_lower), rel_tol=1e-9):
            raise MlcgImportError(
                f"ExpNormalBasis alpha={alpha} differs from 5 / (r_c - r_l) = "
                f"{5.0 / (cutoff - cutoff_lower)}, which {target} cannot express"
            )
    return {
        "cutoff": cutoff,
        "cutoff_lower": cutoff_lower,
        "basis": basis,
        "basis_envelope": basis_kind,
        "conv_envelope": conv_kind,
    }


def _schnet_config(record: Any) -> SchNetConfig:
    """Hyper-parameters of a StandardSchNet record, read off shapes (§5.1)."""
    if _state(record).get("self_interaction"):
        raise MlcgImportError("SchNet with self_interaction=True is not supported")
    embedding_size, hidden = _embedding(record)
    blocks = _children(_child(record, "interaction_blocks"))
    if not blocks:
        raise MlcgImportError("SchNet without interaction blocks")
    convs = [_child(b, "conv") for b in blocks]
    radial = _radial(
        _child(record, "rbf_layer"), [_child(c, "cutoff") for c in convs], "SchNetConfig"
    )
    outputs, activations = _linear_layers(_child(record, "output_network"))
    for block, conv in zip(blocks, convs, strict=True):
        filters, filter_activations = _linear_layers(_child(conv, "filter_network"))
        if len(filters) != 2:
            raise MlcgImportError(
                f"filter networks with {len(filters)} Linear layers are not supported "
                "(2 expected)"
            )
        activations += [*filter_activations, _activation(_child(block, "activation"))]
    filter_shape = _required(filters[0], "weight").shape
    if len(set(activations)) != 1:
        raise MlcgImportError(f"mixed activations {sorted(set(activations))} are not supported")
    widths = [int(_required(m, "weight").shape[0]) for m in outputs]
    if widths[-1] != 1:
        raise MlcgImportError(f"the output network ends in width {widths[-1]}, expected 1")
    return SchNetConfig(
        embedding_size=embedding_size,
        hidden=hidden,
        filters=int(filter_shape[0]),
        blocks=len(blocks),
        num_rbf=int(filter_shape[1]),
        output_widths=widths[:-1],
        activation=activations[0],
        filter_bias=_tensor(filters[1], "bias") is not None,
        **radial,
    )


def _load_weights(model: torch.nn.Module, record: Any) -> torch.nn.Module:
    """Load a record's tensors into ``model`` by state-dict key.

    A bias the record lacks is loaded as zeros; a tensor of the record without a
    counterpart in ``model`` must be a zero bias.
    """
    theirs = _module_tensors(record)
    state = {}
    for key, ours in model.state_dict().items():
        value = theirs.pop(key, None)
        if value is None and key.endswith(".bias"):
            value = torch.zeros_like(ours)
        if value is None:
            raise MlcgImportError(f"the checkpoint has no tensor for {key}")
        if value.shape != ours.shape:
            raise MlcgImportError(
                f"{key} has shape {tuple(value.shape)}, expected {tuple(ours.shape)}"
            )
        state[key] = value.to(ours.dtype)
    for key, value in theirs.items():
        if not (key.endswith(".bias") and not value.any()):
            raise MlcgImportError(f"tensor {key} of the checkpoint has no counterpart")
    model.load_state_dict(state)
    return model


def convert_schnet(record: Any) -> CGSchNet:
    """Our :class:`CGSchNet` with the weights of an mlcg StandardSchNet record.

    Parameters
    ----------
    record : Record
        ``StandardSchNet`` / ``SchNet`` (mlcg or flashmd).

    Raises
    ------
    MlcgImportError
        Something :class:`SchNetConfig` cannot express exactly (see module docstring).
    """
    return _load_weights(CGSchNet(_schnet_config(record)), record)


# -- PaiNN ----------------------------------------------------------------------------


def _context_net(record: Any, name: str) -> list[str]:
    """Activations of a PaiNN context network ``Sequential(Linear, act, Linear)``."""
    layers = _children(_child(record, name))
    if len(layers) != 3 or _class_name(layers[0]) != "Linear" or _class_name(layers[2]) != "Linear":
        raise MlcgImportError(
            f"{name} is not Linear, activation, Linear "
            f"({', '.join(_class_name(m) for m in layers)})"
        )
    return [_activation(layers[1])]


def _painn_config(record: Any) -> PaiNNConfig:
    """Hyper-parameters of a StandardPaiNN record, read off shapes (§5.4)."""
    embedding_size, hidden = _embedding(record)
    interactions = _children(_child(record, "interaction_blocks"))
    mixings = _children(_child(record, "mixing_blocks"))
    if not interactions:
        raise MlcgImportError("PaiNN without interaction blocks")
    if len(mixings) != len(interactions):
        raise MlcgImportError(
            f"PaiNN with {len(interactions)} interaction and {len(mixings)} mixing blocks"
        )
    radial = _radial(
        _child(record, "rbf_layer"), [_child(b, "cutoff") for b in interactions], "PaiNNConfig"
    )
    outputs, activations = _linear_layers(_child(record, "output_network"))
    filter_shapes = set()
    for block in interactions:
        aggr = _state(block).get("aggr", "add")
        if aggr != "add":
            raise MlcgImportError(f"PaiNN aggregation {aggr!r} is not supported ('add')")
        activations += _context_net(block, "interatomic_context_net")
        filter_network = _child(block, "filter_network")
        if _class_name(filter_network) != "Linear":
            raise MlcgImportError(
                f"a PaiNN filter network of class {_class_name(filter_network)} is not "
                "supported (Linear)"
            )
        filter_shapes.add(tuple(_required(filter_network, "weight").shape))
    epsilons = set()
    for block in mixings:
        activations += _context_net(block, "intraatomic_context_net")
        epsilons.add(float(_state(block).get("epsilon", 1e-8)))
    if len(filter_shapes) != 1 or next(iter(filter_shapes))[0] != 3 * hidden:
        raise MlcgImportError(
            f"PaiNN filter networks of shapes {sorted(filter_shapes)}; expected one shape "
            f"[{3 * hidden}, K]"
        )
    if len(epsilons) != 1:
        raise MlcgImportError(f"mixing blocks use different epsilons {sorted(epsilons)}")
    if len(set(activations)) != 1:
        raise MlcgImportError(f"mixed activations {sorted(set(activations))} are not supported")
    widths = [int(_required(m, "weight").shape[0]) for m in outputs]
    if widths[-1] != 1:
        raise MlcgImportError(f"the output network ends in width {widths[-1]}, expected 1")
    return PaiNNConfig(
        embedding_size=embedding_size,
        hidden=hidden,
        blocks=len(interactions),
        num_rbf=int(next(iter(filter_shapes))[1]),
        output_widths=widths[:-1],
        activation=activations[0],
        epsilon=epsilons.pop(),
        **radial,
    )


def convert_painn(record: Any) -> CGPaiNN:
    """Our :class:`CGPaiNN` with the weights of an mlcg StandardPaiNN record.

    Parameters
    ----------
    record : Record
        ``StandardPaiNN`` / ``PaiNN``.

    Raises
    ------
    MlcgImportError
        Something :class:`PaiNNConfig` cannot express exactly: a basis other than
        Gaussian or exp-normal, envelopes with different radii, mixed activations,
        an aggregation other than ``'add'``, or tensors without a counterpart.
    """
    return _load_weights(CGPaiNN(_painn_config(record)), record)


#: Converters of the network classes, by class name: (architecture, converter).
_NETWORKS = {
    "StandardSchNet": ("schnet", convert_schnet),
    "SchNet": ("schnet", convert_schnet),
    "StandardPaiNN": ("painn", convert_painn),
    "PaiNN": ("painn", convert_painn),
}


def convert_network(record: Any) -> torch.nn.Module:
    """Our network for an mlcg network record (SchNet or PaiNN), see :data:`_NETWORKS`."""
    return _NETWORKS[_class_name(record)][1](record)


# -- priors ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Form:
    """How an mlcg prior class maps onto one of our terms."""

    target: type[PriorTerm]
    order: int
    tables: dict[str, str]
    static: bool = False


_HARMONIC = {"x0": "x_0", "k": "k"}
_STATIC_HARMONIC = {"x0": "x0", "k": "k"}
_FORMS = {
    "HarmonicBonds": _Form(HarmonicBonds, 2, _HARMONIC),
    "GeneralBonds": _Form(HarmonicBonds, 2, _HARMONIC),
    "HarmonicAngles": _Form(HarmonicAngles, 3, _HARMONIC),
    "GeneralAngles": _Form(HarmonicAngles, 3, _HARMONIC),
    "HarmonicAnglesRaw": _Form(HarmonicThetaAngles, 3, _HARMONIC),
    "HarmonicImpropers": _Form(HarmonicImpropers, 4, _HARMONIC),
    "Dihedral": _Form(FourierDihedrals, 4, {"k1s": "k1s", "k2s": "k2s", "v0": "v_0"}),
    "FourierSeries": _Form(FourierDihedrals, 4, {"k1s": "k1s", "k2s": "k2s", "v0": "v_0"}),
    "Repulsion": _Form(Repulsion, 2, {"sigma": "sigma"}),
    "ExpRepulsion": _Form(ExpRepulsion, 2, {"alpha": "alpha", "r0": "r_0"}),
    "StaticGeneralBonds": _Form(HarmonicBonds, 2, _STATIC_HARMONIC, True),
    "StaticHarmonicBonds": _Form(HarmonicBonds, 2, _STATIC_HARMONIC, True),
    "StaticGeneralAngles": _Form(HarmonicAngles, 3, _STATIC_HARMONIC, True),
    "StaticHarmonicAngles": _Form(HarmonicAngles, 3, _STATIC_HARMONIC, True),
    "StaticHarmonicImpropers": _Form(HarmonicImpropers, 4, _STATIC_HARMONIC, True),
    "StaticDihedral": _Form(FourierDihedrals, 4, {"k1s": "k1s", "k2s": "k2s", "v0": "v_0"}, True),
}

#: Name of the merged term of each of our classes.
TERM_NAMES = {
    HarmonicBonds: "bonds",
    HarmonicAngles: "angles",
    HarmonicThetaAngles: "theta_angles",
    FourierDihedrals: "dihedrals",
    HarmonicImpropers: "impropers",
    Repulsion: "repulsion",
    ExpRepulsion: "exp_repulsion",
    ConstantEnergy: "offsets",
}


@dataclass
class _Piece:
    """The interactions of one mlcg prior group for the molecule."""

    group: str
    form: _Form
    index: torch.Tensor  # (P, order)
    params: dict[str, torch.Tensor]  # leading dimension P
    offsets: torch.Tensor | None  # V0, (P,)


def _type_indexed(
    record: Any, group: str, form: _Form, molecule: MlcgConfiguration
) -> _Piece:
    """Expand a type-indexed prior to the interactions of the molecule (§7.1)."""
    index = _group_index(molecule, group, form.order)
    types = molecule.atom_types[index.T]
    params = {}
    for ours, theirs in form.tables.items():
        table = _required(record, theirs)
        lead = 1 if ours in ("k1s", "k2s") else 0
        side = table.shape[lead:]
        if len(side) != form.order:
            raise MlcgImportError(
                f"prior {group!r}: table {theirs} has shape {tuple(table.shape)}, "
                f"expected {form.order} type axes"
            )
        if types.numel() and int(types.max()) >= min(side):
            raise MlcgImportError(
                f"prior {group!r}: bead type {int(types.max())} is outside its "
                f"{theirs} table of side {min(side)}"
            )
        value = table[(slice(None),) * lead + tuple(types)]
        params[ours] = (value.T if lead else value).to(torch.float32)
    return _Piece(group, form, index, params, None)


def _group_index(molecule: MlcgConfiguration, group: str, order: int) -> torch.Tensor:
    """``index_mapping`` of a group as (P, order)."""
    if group not in molecule.neighbor_lists:
        raise MlcgImportError(f"the configuration has no neighbor list {group!r} for that prior")
    index = molecule.neighbor_lists[group]
    if index.shape[0] != order:
        raise MlcgImportError(
            f"neighbor list {group!r} has {index.shape[0]} rows, the prior needs {order}"
        )
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= molecule.n_beads):
        raise MlcgImportError(f"neighbor list {group!r} indexes beads outside the molecule")
    return index.T.contiguous()


def _specialised(
    record: Any, group: str, form: _Form, configurations: Sequence[MlcgConfiguration]
) -> _Piece:
    """The rows of a ``Static*`` prior that belong to configuration 0 (§7.4)."""
    index = _group_index(configurations[0], group, form.order)
    counts = [c.neighbor_lists[group].shape[1] for c in configurations]
    params = {}
    for ours, theirs in dict(form.tables, V0="V0").items():
        rows = _tensor(record, theirs)
        if rows is None and ours == "V0":
            continue
        if rows is None:
            raise MlcgImportError(f"specialised prior {group!r} has no tensor {theirs!r}")
        if rows.shape[0] != sum(counts):
            raise MlcgImportError(
                f"specialised prior {group!r} has {rows.shape[0]} rows of {theirs} but its "
                f"configurations list {sum(counts)} interactions; a specialised model is only "
                "valid with the configurations saved with it"
            )
        blocks = rows.split(counts)
        if any(not torch.equal(b, blocks[0]) for b in blocks[1:]):
            raise MlcgImportError(
                f"specialised prior {group!r} has different parameters per configuration"
            )
        params[ours] = blocks[0].to(torch.float32)
    if form.target is FourierDihedrals:
        params["v0"] = params["v0"].reshape(index.shape[0], -1)[:, 0]
    return _Piece(group, form, index, params, params.pop("V0", None))


def _pad_columns(value: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(value, (0, width - value.shape[1]))


def _merge(pieces: list[_Piece]) -> tuple[dict[str, PriorTerm], dict[str, list[str]]]:
    """Concatenate pieces of the same target class into one term each, in file order."""
    by_class: dict[type[PriorTerm], list[_Piece]] = {}
    for piece in pieces:
        by_class.setdefault(piece.form.target, []).append(piece)
    terms: dict[str, PriorTerm] = {}
    groups: dict[str, list[str]] = {}
    for cls, members in by_class.items():
        params = {}
        for name in cls.parameter_names:
            values = [p.params[name] for p in members]
            if values[0].ndim == 2:
                width = max(v.shape[1] for v in values)
                values = [_pad_columns(v, width) for v in values]
            params[name] = torch.cat(values)
        index = torch.cat([p.index for p in members])
        if index.shape[0]:
            terms[TERM_NAMES[cls]] = cls(index, **params)
            groups[TERM_NAMES[cls]] = [p.group for p in members]
    offsets = [p for p in pieces if p.offsets is not None and p.offsets.any()]
    if offsets:
        index = torch.cat([p.index[p.offsets != 0, :1] for p in offsets])
        values = torch.cat([p.offsets[p.offsets != 0] for p in offsets])
        terms[TERM_NAMES[ConstantEnergy]] = ConstantEnergy(index, V0=values)
        groups[TERM_NAMES[ConstantEnergy]] = [p.group for p in offsets]
    return terms, groups


def convert_priors(
    entries: Sequence[tuple[str, Any]], configurations: Sequence[MlcgConfiguration]
) -> tuple[dict[str, PriorTerm], dict[str, list[str]]]:
    """Our prior terms for the molecule of ``configurations``.

    Parameters
    ----------
    entries : sequence of (str, Record)
        Neighbor-list name and prior record, in file order.
    configurations : sequence of MlcgConfiguration
        The configurations the priors belong to (for ``Static*`` priors: exactly
        those saved with them, in order); all the same molecule.

    Returns
    -------
    terms : dict of str to PriorTerm
        Merged terms, named by :data:`TERM_NAMES`.
    groups : dict of str to list of str
        The mlcg groups that make up each term.
    """
    pieces = []
    for group, record in entries:
        form = _FORMS.get(_class_name(record))
        if form is None:
            raise MlcgImportError(
                f"prior {group!r} of class {_class_name(record)} is not supported; supported: "
                f"{', '.join(_FORMS)}"
            )
        order = _state(record).get("order", form.order)
        if order != form.order:
            raise MlcgImportError(f"prior {group!r} has order {order}, expected {form.order}")
        if form.static:
            pieces.append(_specialised(record, group, form, configurations))
        else:
            pieces.append(_type_indexed(record, group, form, configurations[0]))
    return _merge(pieces)


# -- model files ----------------------------------------------------------------------

_WRAPPERS = ("GradientsOut", "EnergyOut")


@dataclass
class _ModelParts:
    network: Any  # Record of a SchNet or PaiNN, or None
    priors: list[tuple[str, Any]]
    configurations: list[MlcgConfiguration] | None
    package: str


def _split_model(obj: Any, source: Path) -> _ModelParts:
    """Network record, prior entries and (specialised files) configurations."""
    configurations = None
    if isinstance(obj, tuple) and len(obj) == 2:
        obj, configurations = obj[0], _configurations(obj, source)
    if isinstance(obj, list):
        raise MlcgImportError(
            f"{source} is a configurations file; give it as the structures, with a model file"
        )
    if not isinstance(obj, Record):
        raise MlcgImportError(f"{source} does not hold an mlcg model ({type(obj).__name__})")
    if _class_name(obj) == "SumOut":
        obj = _child(obj, "models")
    if _class_name(obj) in ("ModuleDict", "SumOut"):
        items = list(_state(obj).get("_modules", {}).items())
    else:
        items = [(_state(obj).get("name", ""), obj)]
    network = None
    priors = []
    for key, wrapper in items:
        inner = _child(wrapper, "model") if _class_name(wrapper) in _WRAPPERS else wrapper
        if _class_name(inner) in _NETWORKS:
            if network is not None:
                raise MlcgImportError(f"{source} holds more than one network (SchNet, PaiNN)")
            network = inner
            continue
        name = _state(inner).get("name") or _state(wrapper).get("name") or key
        priors.append((str(name), inner))
    if network is None and not priors:
        raise MlcgImportError(f"{source} holds neither a network (SchNet, PaiNN) nor priors")
    package = type(network if network is not None else priors[0][1]).__module__.split(".")[0]
    return _ModelParts(network, priors, configurations, package)


def _read(path: str | os.PathLike) -> tuple[Any, Path]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    try:
        return load_checkpoint(path), path
    except CheckpointRefused:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader failure means: not such a file
        raise MlcgImportError(f"{path} is not a readable torch checkpoint: {exc}") from exc


# -- system ---------------------------------------------------------------------------

_THREE_LETTER = {one: three for three, one in ONE_LETTER.items()}
_N, _CA, _C, _O, _GLY_CA = 21, 22, 23, 24, 6


def _residue_name(code: int) -> str:
    """Three-letter name of a CB type code 1..20 (docs/mlcg-format.md §8.1), else ``UNK``."""
    return _THREE_LETTER[TYPE_ORDER[code - 1]] if 1 <= code <= len(TYPE_ORDER) else "UNK"


def _five_bead_residues(types: list[int]) -> list[tuple[str, list[str]]] | None:
    """Parse types as five-bead residues (N, CA, [CB], C, O); None if they are not."""
    residues = []
    i = 0
    while i < len(types):
        if types[i] != _N or i + 1 >= len(types):
            return None
        if types[i + 1] == _GLY_CA:
            names, code = ["N", "CA", "C", "O"], _GLY_CA
        elif types[i + 1] == _CA and i + 2 < len(types) and 1 <= types[i + 2] <= 20:
            names, code = ["N", "CA", "CB", "C", "O"], types[i + 2]
        else:
            return None
        if types[i + len(names) - 2 : i + len(names)] != [_C, _O]:
            return None
        residues.append((_residue_name(code), names))
        i += len(names)
    return residues


def _unique_rows(tensors: list[torch.Tensor], order: int, sort: bool) -> torch.Tensor:
    if not tensors:
        return torch.zeros(0, order, dtype=torch.int64)
    rows = torch.cat(tensors)
    if sort:
        rows = rows.sort(dim=1).values
    seen: dict[tuple[int, ...], None] = dict.fromkeys(map(tuple, rows.tolist()))
    return torch.tensor(list(seen), dtype=torch.int64).reshape(-1, order)


def _prior_indices(potential: Potential, classes: tuple[type[PriorTerm], ...]) -> list:
    return [p.index for p in potential.priors.values() if isinstance(p, classes)]


def system_from_configuration(
    configuration: MlcgConfiguration, potential: Potential, name: str
) -> CGSystem:
    """A :class:`CGSystem` for the molecule of an mlcg configuration.

    Parameters
    ----------
    configuration : MlcgConfiguration
        Its positions become the native structure.
    potential : Potential
        The converted potential; its prior terms give the topology: bonds from
        harmonic bond terms, angles from angle terms, dihedrals from Fourier
        dihedral and improper terms (unique, in term order).
    name : str

    Returns
    -------
    CGSystem
        ``mapping`` is ``"five-bead"`` when the bead types read as N, CA, [CB], C, O
        residues (§8.1) and ``"ca"`` otherwise. Residue names come from the CB type
        codes (§8.1; a CA model typed otherwise gets wrong names, ``UNK`` outside
        1..20); residue ids are 1, 2, ...; a new chain starts wherever no bond joins
        consecutive residues. Masses are converted from amu/418.4 to amu.
        ``native_contacts`` is empty (not derivable from beads), so Q is undefined.
        ``metadata`` records the source, ``residue_names_from_types`` and
        ``exclude_bonded`` (True when the configuration's ``exc_pair_index`` equals
        the bonded 1-2..1-4 exclusions; then build the SchNet graph with them).

    Raises
    ------
    MlcgImportError
        An ``exc_pair_index`` that is not the bonded exclusions.
    """
    types = configuration.atom_types.tolist()
    residues = _five_bead_residues(types)
    if residues is not None:
        mapping = "five-bead"
        bead_names = tuple(n for _, names in residues for n in names)
        bead_residue = torch.tensor(
            [r for r, (_, names) in enumerate(residues) for _ in names], dtype=torch.int64
        )
        residue_names = tuple(res for res, _ in residues)
        ca_index = torch.tensor([i for i, n in enumerate(bead_names) if n == "CA"])
    else:
        mapping = "ca"
        bead_names = ("CA",) * len(types)
        bead_residue = torch.arange(len(types))
        residue_names = tuple(_residue_name(t) for t in types)
        ca_index = torch.arange(len(types))
    bonds = _unique_rows(_prior_indices(potential, (HarmonicBonds,)), 2, sort=True)
    angles = _unique_rows(
        _prior_indices(potential, (HarmonicAngles, HarmonicThetaAngles)), 3, sort=False
    )
    dihedrals = _unique_rows(
        _prior_indices(potential, (FourierDihedrals, HarmonicImpropers)), 4, sort=False
    )
    n_res = len(residue_names)
    joined = torch.zeros(max(n_res - 1, 0), dtype=torch.bool)
    res_a, res_b = bead_residue[bonds[:, 0]], bead_residue[bonds[:, 1]]
    step = (res_b - res_a).abs() == 1
    joined[torch.minimum(res_a, res_b)[step]] = True
    if not bonds.numel():
        joined[:] = True
    chain_index = torch.cat([torch.zeros(min(n_res, 1), dtype=torch.int64), (~joined).cumsum(0)])
    n_chains = int(chain_index.max()) + 1 if n_res else 0
    system = CGSystem(
        name=name,
        mapping=mapping,
        bead_names=bead_names,
        bead_types=configuration.atom_types.clone(),
        masses=(configuration.masses * KCAL_TO_AMU_A2_PS2).to(torch.float32),
        bead_residue=bead_residue.to(torch.int64),
        residue_names=residue_names,
        residue_ids=tuple(str(i + 1) for i in range(n_res)),
        chain_index=chain_index,
        ca_index=ca_index.to(torch.int64),
        bonds=bonds,
        angles=angles,
        dihedrals=dihedrals,
        native_positions=configuration.positions.clone(),
        native_contacts=torch.zeros(0, 2, dtype=torch.int64),
        native_contact_distances=torch.zeros(0, dtype=torch.float32),
        metadata={
            "source": "mlcg configuration",
            "chain_ids": tuple(chr(ord("A") + c % 26) for c in range(n_chains)),
            "missing_heavy_atoms": {},
            "residue_names_from_types": True,
            "exclude_bonded": False,
        },
    )
    if configuration.exclusions is not None:
        pairs = configuration.exclusions.T.sort(dim=1).values.unique(dim=0)
        if not torch.equal(pairs, bonded_exclusions(system).unique(dim=0)):
            raise MlcgImportError(
                "the configuration carries exc_pair_index (pairs left out of the SchNet "
                "graph) that differ from the bonded 1-2/1-3/1-4 exclusions; this cannot be "
                "reproduced"
            )
        system.metadata["exclude_bonded"] = True
    return system


# -- entry points ---------------------------------------------------------------------


class ImportedModel(NamedTuple):
    """Result of :func:`import_mlcg`.

    Attributes
    ----------
    potential : Potential
    system : CGSystem
    positions : torch.Tensor, shape (C, n, 3), float32
        Starting structures, Å, in file order.
    masses : torch.Tensor, shape (n,), float32
        Bead masses in amu (same as ``system.masses``).
    """

    potential: Potential
    system: CGSystem
    positions: torch.Tensor
    masses: torch.Tensor


def import_mlcg(
    model_path: str | os.PathLike, structures_path: str | os.PathLike | None = None
) -> ImportedModel:
    """Convert an mlcg / flashmd checkpoint and its configurations.

    Parameters
    ----------
    model_path : str or os.PathLike
        ``model_and_prior.pt``, a prior file, or ``*_specialized_model_and_config.pt``.
    structures_path : str or os.PathLike, optional
        ``*_configurations.pt`` (a list of AtomicData, or a specialised tuple).
        Required unless the model file carries its configurations; with a
        specialised file it only supplies starting positions (same bead types).

    Returns
    -------
    ImportedModel

    Raises
    ------
    FileNotFoundError
    workbench.model.safe_unpickle.CheckpointRefused
        A class outside the allow-list, or an unsupported model (MACE, ...).
    MlcgImportError
        A file that is not such a checkpoint or cannot be converted exactly.
    """
    obj, model_file = _read(model_path)
    parts = _split_model(obj, model_file)
    structures = None
    if structures_path is not None:
        structures_obj, structures_file = _read(structures_path)
        structures = _configurations(structures_obj, structures_file)
        _single_molecule(structures, str(structures_file))
    topology = parts.configurations if parts.configurations is not None else structures
    if topology is None:
        raise MlcgImportError(
            f"{model_file} carries no configurations; give a structures file "
            "(*_configurations.pt) as well"
        )
    if parts.configurations is not None:
        _single_molecule(parts.configurations, str(model_file))
    molecule = topology[0]
    starts = structures if structures is not None else topology
    if any(not torch.equal(c.atom_types, molecule.atom_types) for c in starts):
        raise MlcgImportError(
            "the structures are not the molecule of the specialised model (bead types differ)"
        )
    network = convert_network(parts.network) if parts.network is not None else None
    priors, groups = convert_priors(parts.priors, topology)
    potential = Potential(molecule.atom_types, network, priors)
    name = molecule.name or model_file.stem
    system = system_from_configuration(molecule, potential, name)
    potential.metadata = {
        "trained": True,
        "description": f"{parts.package} checkpoint {model_file.name}, converted",
        "source": parts.package,
        "model_file": str(model_file),
        "prior_groups": groups,
        "max_num_neighbors": None
        if parts.network is None
        else _state(parts.network).get("max_num_neighbors"),
        "protein": name,
        "mapping": system.mapping,
    }
    positions = torch.stack([c.positions for c in starts])
    cap = potential.metadata["max_num_neighbors"]
    if network is not None and isinstance(cap, int):
        _warn_if_cap_binds(positions, network.cutoff, cap)
    return ImportedModel(potential, system, positions, system.masses)


def _warn_if_cap_binds(positions: torch.Tensor, cutoff: float, cap: int) -> None:
    """Warn when a starting bead has more graph neighbours than mlcg's ``max_num_neighbors``.

    mlcg then drops neighbours in an implementation-defined way (§5.3); this
    potential keeps them all, so energies differ from mlcg's for such structures.
    """
    counts = (torch.cdist(positions, positions) < cutoff).sum(-1) - 1
    if int(counts.max()) > cap:
        warnings.warn(
            f"a starting structure has a bead with {int(counts.max())} neighbours within "
            f"{cutoff} Å, more than the checkpoint's max_num_neighbors={cap}; mlcg would "
            "drop some of them, this potential keeps all",
            stacklevel=3,
        )


def load_for_run(
    model_path: str | os.PathLike, structures_path: str | os.PathLike | None = None
) -> tuple[CGSystem, Potential, torch.Tensor]:
    """System, potential and starting positions ``(C, n, 3)`` for ``workbench run``.

    See :func:`import_mlcg`. Replica ``r`` should start from structure ``r % C``;
    when ``system.metadata['exclude_bonded']`` is True the SchNet graph must leave
    out bonded pairs (``NeighborSettings(exclude_bonded=True)``).
    """
    imported = import_mlcg(model_path, structures_path)
    return imported.system, imported.potential, imported.positions
