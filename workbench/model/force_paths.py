"""Which force path a run's `KernelOptions` get on its device and network, told to the user.

Each architecture implements its own techniques (`workbench.model.architectures`,
`Architecture.fused`: CGSchNet all of them, CGEGNN ``fused_message_passing``, CGPaiNN
``fused_message_passing`` and ``tabulated_filter`` (its message kernel reading the filter
from a table, so the table brings the kernel: `TECHNIQUE_NEEDS`),
CGTensorProduct ``fused_update`` (its radial MLPs; its convolution backends are a switch
of its own); CGDeepPotential
``fused_message_passing``, its descriptor kernel, and its tables, which run in PyTorch);
the MD step's own techniques (`STEP_TECHNIQUES`: the Triton pair search and the fused
Langevin steps) run whatever the network. `settle_options` switches the others off in the
options themselves, so that what a run reports (its banner, summary and benchmark record)
is what ran, and says so in a notice.

Where the Triton kernels can run (`fused_problem` finds nothing), every remaining technique
runs as asked. Elsewhere (a CPU, or a model the kernels do not implement) a CGSchNet's
``tabulated_filter`` still runs, in PyTorch (`workbench.model.pytorch_tables`), and every
other technique falls back to the PyTorch reference path; a CGDeepPotential's tables run in
PyTorch everywhere (`workbench.model.dp_tables`).
"""

from __future__ import annotations

import importlib
from dataclasses import fields

import torch
from torch import nn

from workbench.model.architectures import (
    ARCHITECTURES,
    architecture_of,
    fused_techniques,
    network_kernels,
)
from workbench.model.options import KernelOptions

#: Techniques (and ``mlp_precision``) with a PyTorch implementation, by architecture: they
#: run where the Triton kernels cannot (CGSchNet's tables besides its Triton ones;
#: CGDeepPotential's tables and 16-bit networks).
PYTORCH_TECHNIQUES = {"schnet": frozenset({"tabulated_filter"}),
                      "dp": frozenset({"tabulated_filter", "mlp_precision"}),
                      "nequip": frozenset({"tabulated_filter"})}

#: Techniques (and ``mlp_precision``) that run in PyTorch only, whatever the device, by
#: architecture (the tables on their own put the forces on the ``"pytorch-tables"`` path).
PYTORCH_ONLY = {"dp": frozenset({"tabulated_filter", "mlp_precision"})}

#: What the ``"pytorch-tables"`` path reads from its tables, by architecture (for notices).
TABLE_READERS = {"schnet": "workbench.model.pytorch_tables: each block's filter",
                 "dp": "workbench.model.dp_tables: each embedding network",
                 "nequip": "workbench.model.tensor_product_tables: each block's radial weights"}

#: Techniques of the MD step around the network, which run whatever network the potential
#: holds: the graph from the Triton pair search, and the fused Langevin steps.
STEP_TECHNIQUES = frozenset({"fused_pair_search", "fused_integrator"})

#: The techniques whose kernels walk the graph's slots and CSR layouts; without them a
#: network reads its edge arrays only (`workbench.neighbors.without_empty_slots` applies).
LAYOUT_TECHNIQUES = ("fused_radial_basis", "fused_message_passing", "csr_aggregation",
                     "tabulated_filter", "pair_filter")

#: The techniques whose kernels drop candidate edges beyond the cutoff on the device: an
#: eager step gives them the neighbour list's static candidate arrays (no host
#: synchronisation); other paths get the exact edge list.
CANDIDATE_TECHNIQUES = ("fused_message_passing", "tabulated_filter")

#: Techniques of `LAYOUT_TECHNIQUES` and `CANDIDATE_TECHNIQUES` that read the edge arrays
#: only in a network of the architecture and materialise edge tensors: CGTensorProduct's
#: tables are read per edge (`kernels.table_read`) into its convolution's ``[E, P]``
#: weights, so it gets the exact edge list without empty slots, as its reference path
#: (1ENH × 64, H200, one run: 511 against 679 timestep·mol/s for e3nn's reference convolution over
#: the candidate list, about 1.5 times the edges).
EDGE_ARRAY_TECHNIQUES = {"nequip": frozenset({"tabulated_filter"})}


def _switched_on(network: nn.Module | None, options: KernelOptions, names) -> bool:
    """Whether ``options`` switch on one of ``names`` but the network's
    `EDGE_ARRAY_TECHNIQUES`."""
    architecture = None if network is None else architecture_of(network)
    edges_only = EDGE_ARRAY_TECHNIQUES.get(architecture, frozenset())
    return any(getattr(options, name) for name in names if name not in edges_only)


def reads_candidates(network: nn.Module | None, options: KernelOptions) -> bool:
    """Whether the network's kernels take the neighbour list's candidate edges in an eager
    step (`CANDIDATE_TECHNIQUES` but its architecture's `EDGE_ARRAY_TECHNIQUES`)."""
    return _switched_on(network, options, CANDIDATE_TECHNIQUES)


def walks_layouts(network: nn.Module | None, options: KernelOptions) -> bool:
    """Whether ``options`` switch on a technique that walks the graph's slots and CSR
    layouts in ``network`` (`LAYOUT_TECHNIQUES` but its architecture's
    `EDGE_ARRAY_TECHNIQUES`)."""
    return _switched_on(network, options, LAYOUT_TECHNIQUES)

#: The techniques that keep a network's edge tensors out of memory: captured steps need
#: one of them (`bring_needed`).
CAPTURED_PATHS = ("fused_message_passing", "tabulated_filter")

#: Where an architecture's kernels say why they cannot run a network (``module``,
#: ``function(network, device, options) -> str | None``); an architecture without an entry
#: needs Triton on the device only.
FUSED_PROBLEMS = {
    "schnet": ("workbench.model.fused_schnet", "fused_path_problem"),
    "egnn": ("workbench.model.egnn", "fused_edge_problem"),
    "painn": ("workbench.model.painn", "fused_message_problem"),
    "dp": ("workbench.model.deep_potential", "fused_descriptor_problem"),
    "nequip": ("workbench.model.tensor_product", "fused_radial_problem"),
}

#: Techniques that run inside another technique's kernels, by architecture: asked for
#: without it, they bring it (`bring_needed`). CGPaiNN's filter tables are read by its
#: message kernel (`kernels.painn_message`); without the kernel there is nothing to read
#: them.
TECHNIQUE_NEEDS = {"painn": {"tabulated_filter": "fused_message_passing"}}

#: Techniques that leave another with nothing to run, by architecture: asked for together,
#: the second is switched off with a notice (and ``mlp_precision``, which only its
#: networks read). CGTensorProduct's ``tabulated_filter`` reads every block's radial
#: weights from a table: no radial MLP is left for ``fused_update`` to run.
SUPERSEDES = {"nequip": {"tabulated_filter": "fused_update"}}

NO_TRITON = "Triton kernels need a CUDA GPU (or TRITON_INTERPRET=1 for tests)"


def triton_runs_on(device: torch.device) -> bool:
    """Whether Triton kernels run on ``device``'s tensors: a CUDA GPU with Triton, or any
    device under ``TRITON_INTERPRET=1`` (the tests' CPU stand-in for a GPU)."""
    from kernels import triton_available
    from kernels._triton import INTERPRET

    return triton_available() and (device.type == "cuda" or INTERPRET)


def implemented_techniques(architecture: str | None) -> tuple[str, ...]:
    """The techniques that can run Triton kernels in a run of a potential whose network is
    of ``architecture`` (None: a prior-only potential), in `KernelOptions.techniques` order.

    The network's own (`Architecture.fused`) and the `STEP_TECHNIQUES`; a prior-only
    potential's whole steps are captured too (``cuda_graph``).

    Raises
    ------
    ValueError
        An unknown architecture.
    """
    own = ("cuda_graph",) if architecture is None else fused_techniques(architecture)
    return tuple(t for t in KernelOptions.techniques() if t in own or t in STEP_TECHNIQUES)


def network_name(architecture: str) -> str:
    """The class name of an architecture's network (``"CGPaiNN"``), for messages."""
    return ARCHITECTURES[architecture].network


def drop_unimplemented(options: KernelOptions, architecture: str | None) -> list[str]:
    """Switch off (in place) what ``architecture``'s network has no kernels for.

    Parameters
    ----------
    options : KernelOptions
        Asked for; afterwards what the architecture implements of them.
    architecture : str or None
        The potential's network (None: a prior-only potential, which keeps everything).

    Returns
    -------
    list of str
        The techniques switched off, and ``mlp_precision=...`` when a 16-bit precision
        was asked of a network none of whose own kernels is on (CGSchNet's kernels read
        the precision in any combination, and CGDeepPotential's networks in PyTorch, so
        they keep it).
    """
    if architecture is None:
        return []
    keep = implemented_techniques(architecture)
    dropped = [name for name in KernelOptions.techniques()
               if getattr(options, name) and name not in keep]
    for name in dropped:
        setattr(options, name, False)
    own = [name for name in network_kernels(architecture) if getattr(options, name)]
    keeps = architecture == "schnet" or "mlp_precision" in PYTORCH_TECHNIQUES.get(architecture,
                                                                                  ())
    if options.mlp_precision != "fp32" and not keeps and not own:
        dropped.append(f"mlp_precision={options.mlp_precision}")
        options.mlp_precision = "fp32"
    return dropped


def bring_needed(options: KernelOptions, device: torch.device,
                 architecture: str | None) -> list[str]:
    """Switch on (in place) what a requested technique needs to run or to pay off; the
    names.

    A technique that runs inside another's kernels brings it, on any device
    (`TECHNIQUE_NEEDS`: a CGPaiNN's ``tabulated_filter`` brings ``fused_message_passing``;
    where the kernels cannot run, both fall back together).

    Captured steps (``cuda_graph``) need the network's edge tensors out of memory (one of
    `CAPTURED_PATHS`): captured on the reference path, a step runs them at the neighbour
    list's fixed capacity and was slower than the eager baseline (1ENH × 64, H200: 1,400
    against 2,068 timestep·mol/s). So on a CUDA device ``cuda_graph`` with neither of them
    on brings the network's ``fused_message_passing``, where it has one.

    Parameters
    ----------
    options : KernelOptions
        Asked for (after `drop_unimplemented`); afterwards with what they need.
    device : torch.device
        Where the run is (nothing is captured off a CUDA device).
    architecture : str or None
        The potential's network (None: a prior-only potential, which needs nothing).

    Returns
    -------
    list of str
        The techniques switched on.
    """
    if architecture is None:
        return []
    for name, needed in TECHNIQUE_NEEDS.get(architecture, {}).items():
        if getattr(options, name) and not getattr(options, needed):
            setattr(options, needed, True)
            return [needed]
    if not options.cuda_graph or device.type != "cuda":
        return []
    own = implemented_techniques(architecture)
    if "fused_message_passing" not in own or any(
            getattr(options, name) for name in CAPTURED_PATHS if name in own):
        return []
    options.fused_message_passing = True
    return ["fused_message_passing"]


def brought_notice(brought: list[str], architecture: str | None = None,
                   options: KernelOptions | None = None) -> str:
    """The user's notice of what `bring_needed` brought to ``options`` (afterwards) for a
    network of ``architecture``: what a technique of them runs inside (`TECHNIQUE_NEEDS`),
    else what ``cuda_graph`` needs."""
    needs = [name for name, needed in TECHNIQUE_NEEDS.get(architecture, {}).items()
             if needed in brought and options is not None and getattr(options, name)]
    if needs:
        return (f"{', '.join(needs)} brings {', '.join(brought)}: "
                f"{network_name(architecture)} runs {', '.join(needs)} inside the kernels of "
                f"{', '.join(brought)}.")
    return (f"cuda_graph brings {', '.join(brought)}: captured steps need the edge tensors "
            "out of memory (captured on the reference path they were slower than eager "
            "steps).")


def fused_problem(network: nn.Module | None, device: torch.device,
                  options: KernelOptions) -> str | None:
    """Why the Triton kernels cannot run ``options`` here (None if they can): the reasons
    of the network's kernels (`FUSED_PROBLEMS`, e.g. `fused_path_problem` for a CGSchNet),
    or whether Triton runs on ``device`` at all."""
    architecture = None if network is None else architecture_of(network)
    if architecture in FUSED_PROBLEMS and any(
            getattr(options, name) for name in network_kernels(architecture)):
        module, function = FUSED_PROBLEMS[architecture]
        return getattr(importlib.import_module(module), function)(network, device, options)
    return None if triton_runs_on(device) else NO_TRITON


def force_path(network: nn.Module | None, device: torch.device, options: KernelOptions) -> str:
    """What evaluates the forces: ``"triton"`` (fused kernels), ``"pytorch-tables"`` (a
    CGSchNet's or CGDeepPotential's tables in PyTorch) or ``"reference"``.

    A network other than CGSchNet is on the Triton path only with one of its own Triton
    kernels on (CGEGNN's and CGPaiNN's ``fused_message_passing``, CGPaiNN's
    ``tabulated_filter``, CGDeepPotential's fused descriptor, CGTensorProduct's
    ``fused_update`` and ``tabulated_filter``); otherwise its PyTorch tables, if on, or its
    reference path compute the forces whatever the step's techniques.
    """
    if options.is_baseline:
        return "reference"
    architecture = None if network is None else architecture_of(network)
    own = [] if architecture is None else [
        name for name in network_kernels(architecture) if getattr(options, name)]
    if architecture is not None and architecture != "schnet" and not own:
        return "reference"
    triton = architecture in (None, "schnet") or any(
        name not in PYTORCH_ONLY.get(architecture, ()) for name in own)
    if triton and fused_problem(network, device, options) is None:
        return "triton"
    tables = PYTORCH_TECHNIQUES.get(architecture, frozenset())
    return "pytorch-tables" if options.tabulated_filter and tables else "reference"


def settle_options(options: KernelOptions, device: torch.device,
                   network: nn.Module | None) -> list[str]:
    """Switch off (in place) the techniques that cannot run here; notices for the user.

    Parameters
    ----------
    options : KernelOptions
        Asked for; afterwards what runs.
    device : torch.device
    network : nn.Module or None
        The potential's network, of any registered architecture (None for a prior-only
        potential).

    Returns
    -------
    list of str
        A notice naming what the network has no kernels for, one naming what a technique
        or ``cuda_graph`` brought (`bring_needed`), one naming what fell back on this
        device, and one naming the PyTorch tables path when it runs.
    """
    notices = []
    architecture = None if network is None else architecture_of(network)
    absent = drop_unimplemented(options, architecture)
    if absent:
        notices.append(f"{network_name(architecture)} has no fused kernels for "
                       f"{', '.join(absent)}: switched off, its PyTorch reference path runs.")
    brought = bring_needed(options, device, architecture)
    if brought:
        notices.append(brought_notice(brought, architecture, options))
    for name, superseded in SUPERSEDES.get(architecture, {}).items():
        if getattr(options, name) and getattr(options, superseded):
            setattr(options, superseded, False)
            off = [superseded]
            if options.mlp_precision != "fp32":
                off.append(f"mlp_precision={options.mlp_precision}")
                options.mlp_precision = "fp32"
            notices.append(f"{name} leaves {superseded} nothing to run in "
                           f"{network_name(architecture)}: {', '.join(off)} switched off.")
    problem = None if options.is_baseline else fused_problem(network, device, options)
    if problem is not None:
        keep = PYTORCH_TECHNIQUES.get(architecture, frozenset())
        dropped = [f.name for f in fields(options)
                   if f.type == "bool" and getattr(options, f.name) and f.name not in keep]
        for name in dropped:
            setattr(options, name, False)
        if options.mlp_precision != "fp32" and "mlp_precision" not in keep:
            dropped.append(f"mlp_precision={options.mlp_precision}")
            options.mlp_precision = "fp32"
        if dropped:
            notices.append(f"Fused kernels unavailable ({problem}): {', '.join(dropped)} "
                           "fell back to the PyTorch reference path.")
    if force_path(network, device, options) == "pytorch-tables":
        count = torch.get_num_threads()
        threads = f", {count} thread{'s' * (count != 1)}" if device.type == "cpu" else ""
        notices.append(f"Tabulated filters in PyTorch ({TABLE_READERS[architecture]} "
                       f"from its cubic Hermite table{threads}).")
    return notices
