"""Test-only stand-ins for the mlcg / flashmd / torch_geometric classes of published
CGSchNet checkpoints (docs/mlcg-format.md).

The classes have the pickled attribute layout of the originals and evaluate
their math directly (type-indexed tables, ``index_mapping`` lookups, collation),
without workbench code, so that a converted model can be checked against them.
They are importable under the published module paths only inside
:func:`install_standins`.
"""

from __future__ import annotations

import copy

from .data import collate
from .registry import install_standins

__all__ = ["collate", "install_standins", "reference"]


def reference(model, configurations):
    """Energies (C,) and forces (C, n, 3) of a SumOut stand-in, in float64.

    The configurations are collated in list order (as mlcg batches them) and
    evaluated by a float64 copy of ``model``.
    """
    batch = collate(configurations)
    energy, forces = copy.deepcopy(model).double()(batch)
    return energy, forces.reshape(len(configurations), -1, 3)
