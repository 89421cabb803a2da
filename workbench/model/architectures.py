"""The neural networks a :class:`~workbench.model.potential.Potential` can hold.

Every architecture is one line of :data:`ARCHITECTURES`: its name (also the attribute
of the potential that holds the network, the prefix of its state-dict keys, the name
of its energy term and the key of its config in saved files) and where its config
and network classes live, imported on first use. A network class must

* be built as ``Network(config)`` from its config dataclass, which has ``to_dict()``
  and a ``from_dict(dict)`` classmethod that refuses unknown keys;
* expose ``config`` (with ``embedding_size``) and ``cutoff`` (graph radius, Å);
* evaluate ``forward(pos, types, graph, options=None) -> node energies (N,)`` with
  ``pos`` (N, 3), ``types`` (N,) int64 and a :class:`~workbench.neighbors.Graph`
  whose padding slots and edges at or beyond the cutoff contribute nothing.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

from torch import nn


class Architecture(NamedTuple):
    """Where an architecture's classes live.

    Attributes
    ----------
    module : str
        Dotted module path.
    config : str
        Name of the config dataclass in that module.
    network : str
        Name of the ``nn.Module`` class in that module.
    fused : tuple of str
        The techniques of `workbench.model.options.KernelOptions` that run Triton kernels
        for this network (its own kernels, and ``cuda_graph`` where
        `workbench.md.captured_steps` captures its steps); the others run its reference
        path. The MD step's own techniques (``fused_pair_search``, ``fused_integrator``)
        run whatever the network (`workbench.model.force_paths.STEP_TECHNIQUES`).
    """

    module: str
    config: str
    network: str
    fused: tuple[str, ...] = ()

    def config_class(self) -> type:
        """The config dataclass."""
        return getattr(importlib.import_module(self.module), self.config)

    def network_class(self) -> type[nn.Module]:
        """The network class."""
        return getattr(importlib.import_module(self.module), self.network)


#: Registered architectures by name; files without a name hold ``"schnet"``.
ARCHITECTURES: dict[str, Architecture] = {
    "schnet": Architecture("workbench.model.schnet", "SchNetConfig", "CGSchNet",
                           ("fused_radial_basis", "fused_message_passing", "csr_aggregation",
                            "fused_update", "tabulated_filter", "cuda_graph", "pair_filter")),
    # its tables are read by its message kernel: tabulated_filter brings
    # fused_message_passing (`workbench.model.force_paths.TECHNIQUE_NEEDS`)
    "painn": Architecture("workbench.model.painn", "PaiNNConfig", "CGPaiNN",
                          ("fused_message_passing", "tabulated_filter", "cuda_graph")),
    "egnn": Architecture("workbench.model.egnn", "EGNNConfig", "CGEGNN",
                         ("fused_message_passing", "cuda_graph")),
    # its convolution backends are a switch of the network (`CGTensorProduct.backend`);
    # fused_update runs its radial MLPs in the packed linear kernel; its radial weights'
    # tables run in PyTorch on any device (`workbench.model.tensor_product_tables`). Its
    # steps are captured on the OpenEquivariance backend only
    # (`workbench.model.tensor_product.UNCAPTURED_TP_BACKENDS`; docs/tensor-product.md)
    "nequip": Architecture("workbench.model.tensor_product", "TensorProductConfig",
                           "CGTensorProduct", ("fused_update", "tabulated_filter", "cuda_graph")),
    # its tables run in PyTorch on any device (`workbench.model.dp_tables`); its fused
    # descriptor kernel reads them
    "dp": Architecture("workbench.model.deep_potential", "DeepPotentialConfig",
                       "CGDeepPotential",
                       ("fused_message_passing", "tabulated_filter", "cuda_graph")),
}

#: Attributes of a Potential that an architecture name must not shadow.
RESERVED_NAMES = frozenset({"network", "priors", "bead_types", "metadata", "architecture"})


def _entry(name: str) -> Architecture:
    if name in RESERVED_NAMES or name not in ARCHITECTURES:
        raise ValueError(f"unknown network architecture {name!r}; known: {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[name]


def fused_techniques(name: str) -> tuple[str, ...]:
    """The techniques that run Triton kernels for a network of architecture ``name``
    (`Architecture.fused`).

    Raises
    ------
    ValueError
        An unknown architecture.
    """
    return _entry(name).fused


def network_kernels(name: str) -> tuple[str, ...]:
    """The techniques of architecture ``name`` that run the network's own Triton kernels:
    `fused_techniques` but ``cuda_graph``, which captures the whole step around them.

    Raises
    ------
    ValueError
        An unknown architecture.
    """
    return tuple(t for t in fused_techniques(name) if t != "cuda_graph")


def architecture_of(network: nn.Module) -> str:
    """Registered name of ``network``'s class.

    Raises
    ------
    TypeError
        A module of no registered architecture.
    """
    for name, entry in ARCHITECTURES.items():
        if type(network) is entry.network_class():
            return name
    for name, entry in ARCHITECTURES.items():
        if isinstance(network, entry.network_class()):
            return name
    raise TypeError(
        f"{type(network).__name__} is not a registered network architecture "
        f"({', '.join(sorted(ARCHITECTURES))}); add it to "
        "workbench.model.architectures.ARCHITECTURES"
    )


def architecture_of_config(config: Any) -> str:
    """Registered name of the architecture whose config class ``config`` is an instance of.

    Raises
    ------
    TypeError
        A config of no registered architecture.
    """
    for name, entry in ARCHITECTURES.items():
        if type(config) is entry.config_class():
            return name
    raise TypeError(
        f"{type(config).__name__} is the config of no registered network architecture "
        f"({', '.join(sorted(ARCHITECTURES))})"
    )


def config_from_dict(name: str, data: dict) -> Any:
    """The config of architecture ``name`` from its ``to_dict()`` form.

    Raises
    ------
    ValueError
        An unknown architecture or config key.
    """
    return _entry(name).config_class().from_dict(data)


def output_parameters(network: nn.Module) -> list:
    """The tensors that ``network``'s energy is linear and homogeneous in, weight first:
    multiplying them all by ``c`` multiplies every node energy by ``c``.

    A network's own ``output_parameters`` where it has one (CGDeepPotential: its fitting
    networks' last weights and the per-type energy bias), else the weight and bias of the
    last layer of its ``output_network`` (CGSchNet, CGPaiNN, CGEGNN, CGTensorProduct).
    """
    own = getattr(network, "output_parameters", None)
    if own is not None:
        return list(own)
    last = network.output_network.layers[-1]
    return [last.weight] + ([last.bias] if last.bias is not None else [])


def build_network(name: str, config: Any) -> nn.Module:
    """A freshly initialised network of architecture ``name``.

    Parameters
    ----------
    name : str
        Key of :data:`ARCHITECTURES`.
    config : dataclass or dict
        Its config, or the ``to_dict()`` form of it.
    """
    if isinstance(config, dict):
        config = config_from_dict(name, config)
    return _entry(name).network_class()(config)
