"""Allow-listed unpickling of mlcg / flashmd checkpoints without mlcg installed.

mlcg files (docs/mlcg-format.md §1–§2) are ``torch.save`` archives that pickle whole
``nn.Module`` trees by class path. They are read here with ``torch.load`` and
this module as its ``pickle_module``: every global the pickle names goes through
:meth:`Unpickler.find_class`, which returns

* a small set of real, harmless callables: the torch tensor / parameter / sparse
  rebuild functions, ``torch.Size``, torch dtypes, ``OrderedDict``, plain
  builtins, and guarded stand-ins for ``numpy.dtype``, the numpy scalar
  constructor, ``_codecs.encode``, ``operator.getitem`` and ``type``;
* an inert :class:`Record` class for the listed mlcg / flashmd classes and for the
  structure-only namespaces ``torch.nn.modules``, ``torch_geometric`` and
  ``typing`` (plus three ``inspect`` names and ``torch.Tensor`` as annotations).
  Records accept any constructor arguments and any ``__setstate__`` payload
  and run nothing; the converter reads their ``state`` afterwards;

and refuses everything else with :class:`DisallowedGlobalError`, naming the
global. Classes of mlcg models other than SchNet and PaiNN (MACE, ...) are refused
with :class:`UnsupportedModelError`. No code from the file is ever executed.
"""

from __future__ import annotations

import _compat_pickle
import builtins
import collections
import os
import pickle
import sys
from typing import Any, ClassVar

import numpy as np
import torch

from workbench.model.io import ModelFormatError


class CheckpointRefused(ModelFormatError):
    """A checkpoint was refused while being read."""


class DisallowedGlobalError(CheckpointRefused):
    """The pickle names a global that is not on the allow-list.

    Attributes
    ----------
    global_name : str
        ``module.name`` of the refused global.
    """

    def __init__(self, global_name: str):
        super().__init__(
            f"refusing to load {global_name!r}: it is not on the allow-list of classes "
            "that may occur in an mlcg / flashmd checkpoint, so the file is not read"
        )
        self.global_name = global_name


class UnsupportedModelError(CheckpointRefused):
    """The checkpoint holds an mlcg model other than SchNet or PaiNN."""


class Record:
    """Inert stand-in for a class named in a pickle.

    Subclasses are made by :func:`record_class`, one per dotted name, so that
    ``type(obj).__name__`` is the original class name and
    ``type(obj).dotted_name`` its full path.

    Attributes
    ----------
    args : tuple
        Positional constructor arguments found in the pickle.
    state : object
        The ``__setstate__`` payload (a dict for pickled modules), or None.
    """

    dotted_name: ClassVar[str] = "Record"

    def __new__(cls, *args: Any, **kwargs: Any):
        obj = super().__new__(cls)
        obj.args = args
        obj.state = None
        return obj

    def __init__(self, *args: Any, **kwargs: Any):
        """Accept and ignore any arguments (they are kept by ``__new__``)."""

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __repr__(self) -> str:
        return f"<record of {self.dotted_name}>"


_RECORD_CLASSES: dict[str, type[Record]] = {}


def record_class(module: str, name: str) -> type[Record]:
    """The :class:`Record` subclass standing for ``module.name`` (cached)."""
    dotted = f"{module}.{name}"
    if dotted not in _RECORD_CLASSES:
        _RECORD_CLASSES[dotted] = type(
            name, (Record,), {"__module__": module, "__qualname__": name, "dotted_name": dotted}
        )
    return _RECORD_CLASSES[dotted]


#: Prior classes by module (current layout, relative to ``<pkg>.nn.prior`` / ``flashmd.prior``).
PRIOR_MODULES: dict[str, tuple[str, ...]] = {
    "harmonic": (
        "Harmonic", "HarmonicBonds", "HarmonicAngles", "HarmonicAnglesRaw", "HarmonicImpropers",
        "ShiftedPeriodicHarmonicImpropers", "GeneralBonds", "GeneralAngles",
    ),
    "repulsion": ("Repulsion", "CutoffRepulsion", "ExpRepulsion", "CutoffExpRepulsion"),
    "fourier_series": ("FourierSeries", "Dihedral"),
    "polynomial": ("Polynomial", "QuarticAngles", "QuarticRawAngles"),
    "restricted_bending": ("RestrictedQuartic",),
}

STATIC_PRIORS = (
    "StaticDihedral", "StaticGeneralAngles", "StaticGeneralBonds", "StaticHarmonicBonds",
    "StaticHarmonicAngles", "StaticHarmonicImpropers",
)

#: Allowed classes of the mlcg / flashmd packages, by module path with the package
#: name (``mlcg`` / ``flashmd``) and the ``nn`` / ``models`` level removed.
PACKAGE_CLASSES: dict[str, tuple[str, ...]] = {
    "gradients": ("SumOut", "GradientsOut", "EnergyOut"),
    "schnet": ("StandardSchNet", "SchNet", "InteractionBlock", "CFConv"),
    "painn": ("StandardPaiNN", "PaiNN", "PaiNNInteraction", "PaiNNMixing"),
    "mlp": ("MLP",),
    "cutoff": ("CosineCutoff", "IdentityCutoff", "ShiftedCosineCutoff"),
    "radial_basis.gaussian": ("GaussianBasis",),
    "radial_basis.exp_normal": ("ExpNormalBasis", "ExtendedExpNormalBasis"),
    "radial_basis.exp_spaced": ("SpacedExpBasis",),
    "prior": tuple(name for names in PRIOR_MODULES.values() for name in names),
    **{f"prior.{module}": names for module, names in PRIOR_MODULES.items()},
    "simulation.specialize_prior": STATIC_PRIORS,
    "data.atomic_data": ("AtomicData",),
}

#: Modules of mlcg / flashmd models that are known but not convertible (same
#: shortened paths as ``PACKAGE_CLASSES``), and single classes likewise.
UNSUPPORTED_MODULES = {
    "mace": "MACE", "so3krates": "So3krates", "allegro": "Allegro",
    "attention": "attention-based SchNet", "radial_basis.regularized_basis": "regularised-basis",
}
UNSUPPORTED_CLASSES = {
    "schnet.AttentiveSchNet": "AttentiveSchNet",
    "schnet.RBFRegularizedSchNet": "RBFRegularizedSchNet",
    "painn.RBFRegularizedPaiNN": "RBFRegularizedPaiNN",
    "mlp.TypesMLP": "TypesMLP",
}

#: Namespaces whose classes only carry structure; any of their names becomes a Record.
RECORD_NAMESPACES = ("torch.nn.modules.", "torch_geometric.", "typing.")
RECORD_NAMES = frozenset(
    {"inspect._empty", "inspect.Parameter", "inspect._ParameterKind", "torch.Tensor"}
)

_TORCH_REBUILD = (
    "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
    "_rebuild_parameter_with_state", "_rebuild_sparse_tensor",
)
_BUILTINS = ("set", "frozenset", "int", "float", "str", "bool", "dict", "list", "tuple")


def _numpy_dtype(spec: Any, align: bool = False, copy: bool = False) -> np.dtype:
    """``numpy.dtype`` restricted to numeric type codes."""
    if not isinstance(spec, str):
        raise DisallowedGlobalError(f"numpy.dtype({type(spec).__name__})")
    dtype = np.dtype(spec, bool(align), bool(copy))
    if dtype.kind not in "biufc":
        raise DisallowedGlobalError(f"numpy.dtype({spec!r})")
    return dtype


def _numpy_scalar(dtype: np.dtype, data: bytes | None = None) -> int | float | bool | complex:
    """The numpy scalar constructor, returning the equivalent Python number."""
    if not isinstance(dtype, np.dtype) or dtype.kind not in "biufc" or data is None:
        raise DisallowedGlobalError(f"numpy scalar of {dtype!r}")
    return np.frombuffer(data, dtype=dtype, count=1)[0].item()


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol 2 uses it for raw bytes (latin-1 only)."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise DisallowedGlobalError(f"_codecs.encode(..., {encoding!r})")
    return text.encode("latin1")


def _subscript(obj: Any, item: Any) -> Record:
    """``operator.getitem`` as annotations use it (``Optional[X]``): an inert record."""
    return record_class("typing", "Subscripted")(obj, item)


def _none_type(obj: Any) -> type:
    """``type(None)``; any other argument is refused."""
    if obj is not None:
        raise DisallowedGlobalError(f"builtins.type({type(obj).__name__})")
    return type(None)


_FUNCTIONS = {
    "numpy.dtype": _numpy_dtype,
    "numpy.core.multiarray.scalar": _numpy_scalar,
    "numpy._core.multiarray.scalar": _numpy_scalar,
    "_codecs.encode": _latin1_encode,
    "_operator.getitem": _subscript,
    "operator.getitem": _subscript,
    "builtins.type": _none_type,
    "collections.OrderedDict": collections.OrderedDict,
    "torch.Size": torch.Size,
    "torch.serialization._get_layout": torch.serialization._get_layout,
    **{f"builtins.{name}": getattr(builtins, name) for name in _BUILTINS},
}


def _package_path(module: str) -> str | None:
    """``mlcg.nn.schnet`` → ``schnet``; None for modules outside mlcg / flashmd."""
    head, _, rest = module.partition(".")
    if head not in ("mlcg", "flashmd"):
        return None
    for level in ("nn.", "models."):
        if rest.startswith(level):
            return rest[len(level) :]
    return rest


def resolve_global(module: str, name: str) -> Any:
    """What a pickle's reference to ``module.name`` resolves to, or an error.

    Raises
    ------
    UnsupportedModelError
        A class of a known but unsupported mlcg model.
    DisallowedGlobalError
        Anything not on the allow-list.
    """
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    module = _compat_pickle.IMPORT_MAPPING.get(module, module)
    dotted = f"{module}.{name}"
    if dotted in _FUNCTIONS:
        return _FUNCTIONS[dotted]
    if module == "torch._utils" and name in _TORCH_REBUILD:
        return getattr(torch._utils, name)
    if module == "torch" and isinstance(vars(torch).get(name), torch.dtype):
        return vars(torch)[name]
    if dotted in RECORD_NAMES or dotted.startswith(RECORD_NAMESPACES):
        return record_class(module, name)
    short = _package_path(module)
    if short is not None:
        family = UNSUPPORTED_MODULES.get(short) or UNSUPPORTED_CLASSES.get(f"{short}.{name}")
        if family is not None:
            raise UnsupportedModelError(
                f"{dotted} belongs to an mlcg {family} model, which cannot be converted; "
                "only SchNet / StandardSchNet and PaiNN / StandardPaiNN models (with priors) "
                "are supported"
            )
        if name in PACKAGE_CLASSES.get(short, ()):
            return record_class(module, name)
    raise DisallowedGlobalError(dotted)


class Unpickler(pickle.Unpickler):
    """A pickle reader whose globals come only from :func:`resolve_global`."""

    def find_class(self, module: str, name: str) -> Any:
        return resolve_global(module, name)


def load(file, **kwargs: Any) -> Any:
    """``pickle.load`` through :class:`Unpickler` (used by torch for old-format files)."""
    return Unpickler(file, **kwargs).load()


def load_checkpoint(path: str | os.PathLike) -> Any:
    """Read an mlcg / flashmd ``torch.save`` file into records and CPU tensors.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    object
        The unpickled object: :class:`Record` instances in place of mlcg, torch.nn
        and torch_geometric objects; real tensors, dicts, lists and numbers.

    Raises
    ------
    CheckpointRefused
        The file names a global outside the allow-list, or an unsupported model.
    pickle.UnpicklingError, RuntimeError, EOFError, ...
        The file is not a readable torch / pickle file.
    """
    return torch.load(
        path, map_location="cpu", pickle_module=sys.modules[__name__], weights_only=False
    )
