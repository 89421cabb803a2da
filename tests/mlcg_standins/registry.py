"""Expose the stand-ins under the module paths of mlcg, flashmd and torch_geometric.

:func:`install_standins` puts module objects named ``mlcg.nn.schnet``,
``flashmd.models.schnet``, ``torch_geometric.inspector``, ... into ``sys.modules``
for the duration of a ``with`` block only, so that ``torch.save`` pickles the
stand-ins under the published class paths. Each path gets its own subclass
(same name, same math), because one class can be pickled under one path only.
"""

from __future__ import annotations

import contextlib
import sys
import types
from types import SimpleNamespace

from . import data, models, priors, pyg

_NN = {
    "schnet": (models.StandardSchNet, models.SchNet, models.InteractionBlock, models.CFConv),
    "gradients": (models.SumOut, models.GradientsOut),
    "mlp": (models.MLP,),
    "cutoff": (models.CosineCutoff, models.IdentityCutoff),
    "radial_basis.gaussian": (models.GaussianBasis,),
}
_PYG = {
    "torch_geometric.inspector": (pyg.Inspector, pyg.Signature, pyg.Parameter),
    "torch_geometric.nn.conv.utils.inspector": (pyg.OldInspector,),
    "torch_geometric.nn.aggr.basic": (pyg.SumAggregation,),
    "torch_geometric.data.storage": (data.GlobalStorage,),
}
_RENAMED = {pyg.OldInspector: "Inspector"}


def _variant(base, module):
    name = _RENAMED.get(base, base.__name__)
    return type(name, (base,), {"__module__": module, "__qualname__": name, "__slots__": ()})


def _layouts():
    """(flavour, module path, stand-in classes) of every module to create."""
    for flavour, nn_root in (("mlcg", "mlcg.nn"), ("flashmd", "flashmd.models")):
        package = flavour
        for sub, classes in _NN.items():
            yield flavour, f"{nn_root}.{sub}", classes
        prior_root = f"{nn_root}.prior" if flavour == "mlcg" else "flashmd.prior"
        for sub, classes in priors.PRIOR_MODULES.items():
            yield flavour, f"{prior_root}.{sub}", classes
        yield flavour, f"{package}.simulation.specialize_prior", priors.STATIC_PRIORS
        yield flavour, f"{package}.data.atomic_data", (data.AtomicData,)
    yield "mlcg", "mlcg.nn.radial_basis.exp_normal", (models.ExpNormalBasis,)
    yield "mlcg", "mlcg.nn.painn", (models.StandardPaiNN, models.PaiNNInteraction,
                                    models.PaiNNMixing, models.RBFRegularizedPaiNN)
    old_layout = tuple(c for classes in priors.PRIOR_MODULES.values() for c in classes)
    yield "mlcg_old", "mlcg.nn.prior", old_layout
    for module, classes in _PYG.items():
        yield "pyg", module, classes


@contextlib.contextmanager
def install_standins():
    """Register the stand-in modules; yields namespaces of classes per flavour.

    Yields
    ------
    SimpleNamespace
        ``mlcg`` (current prior layout), ``mlcg_old`` (mlcg with the pre-2025
        ``mlcg.nn.prior.<Class>`` layout), ``flashmd``; each has an attribute per
        class name, plus the torch_geometric stand-ins under their class names and
        ``OldInspector``.
    """
    modules: dict[str, types.ModuleType] = {}
    flavours = {"mlcg": {}, "flashmd": {}, "mlcg_old": {}, "pyg": {}}
    for flavour, path, classes in _layouts():
        parts = path.split(".")
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            if name not in modules:
                if name in sys.modules:
                    raise RuntimeError(f"a real module {name} is loaded; stand-ins would clash")
                modules[name] = types.ModuleType(name)
                if depth > 1:
                    setattr(modules[".".join(parts[: depth - 1])], parts[depth - 1], modules[name])
        for base in classes:
            cls = _variant(base, path)
            setattr(modules[path], cls.__name__, cls)
            flavours[flavour][base.__name__] = cls
    shared = flavours.pop("pyg")
    flavours["mlcg_old"] = {**flavours["mlcg"], **flavours["mlcg_old"]}
    sys.modules.update(modules)
    try:
        yield SimpleNamespace(
            **{key: SimpleNamespace(**classes, **shared) for key, classes in flavours.items()}
        )
    finally:
        for name in modules:
            sys.modules.pop(name, None)
