"""Stand-ins for the torch_geometric records inside mlcg pickles (docs/mlcg-format.md §2.3).

Only their pickled layout matters: the converter must ignore all of them.
Annotations are ``typing.Optional[...]`` on purpose: that is what PyG records hold,
and it pickles as ``operator.getitem(typing.Union, (X, NoneType))``.
"""

from __future__ import annotations

import collections
import inspect
import typing

import torch
from torch import nn

Signature = collections.namedtuple("Signature", ["param_dict", "return_type", "return_type_repr"])
Parameter = collections.namedtuple("Parameter", ["name", "type", "type_repr", "default"])


class Inspector:
    """PyG >= 2.5 inspector: ``_cls``, ``_signature_dict``, ``_source_dict``."""

    def __init__(self, cls, signature_cls, parameter_cls):
        x_j = parameter_cls("x_j", torch.Tensor, "Tensor", inspect.Parameter.empty)
        size = parameter_cls("size", typing.Optional[int], "Optional[int]", None)  # noqa: UP045
        self._cls = cls
        self._signature_dict = {
            "message": signature_cls({"x_j": x_j, "size": size}, torch.Tensor, "Tensor")
        }
        self._source_dict = {cls.__name__: "class CFConv(MessagePassing):\n    ...\n"}


class OldInspector:
    """PyG < 2.5 inspector: ``base_class`` (the conv itself) and ``params``."""

    def __init__(self, base_class):
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        self.base_class = base_class
        self.params = {
            "message": collections.OrderedDict(
                x_j=inspect.Parameter("x_j", kind),
                size=inspect.Parameter("size", kind, annotation=typing.Optional[int]),  # noqa: UP045
            )
        }


class SumAggregation(nn.Module):
    """``aggr_module`` of newer PyG versions."""

    def __init__(self):
        super().__init__()
        self._deterministic = False
