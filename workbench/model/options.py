"""Runtime switches for the fused kernels, one per technique.

An options object belongs to one simulation and is read at every force
evaluation, so switches take effect at the next step. All switches off is the
PyTorch reference path (the baseline every speedup is measured against).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields

PRECISIONS = ("fp32", "fp16", "bf16")

#: The techniques that ``all`` switches on (tabulated filters and CUDA graphs are added by
#: name).
ALL_FUSED = ("fused_radial_basis", "fused_message_passing", "csr_aggregation", "fused_update",
             "fused_pair_search", "fused_integrator", "pair_filter")

#: Named kernel configurations and the techniques each switches on: the one table that the
#: command line, the workbench, the benchmarks and the scripts read.
PRESETS: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "all": ALL_FUSED,
    "all+tables": (*ALL_FUSED, "tabulated_filter"),
    "all+graph": (*ALL_FUSED, "cuda_graph"),
    "all+tables+graph": (*ALL_FUSED, "tabulated_filter", "cuda_graph"),
    # the fastest path: tabulated filters (CSR-owned reductions inside) over the graph of the
    # Triton pair search, node layers in split-weight 3xTF32 kernels, fused Langevin steps,
    # all captured
    "tables+graph": ("tabulated_filter", "cuda_graph", "fused_pair_search", "fused_integrator",
                     "fused_update"),
}

#: The preset of the fastest path measured (the command line's and the workbench's).
FASTEST = "tables+graph"


@dataclass
class KernelOptions:
    """Which fused techniques the force evaluation uses.

    Attributes
    ----------
    fused_radial_basis : bool
        Distance, basis and envelope in one kernel.
    fused_message_passing : bool
        Distance → basis → filter MLP → envelope → message → reduction in one
        kernel; no edge tensor is written to memory. The filter GEMMs run on tensor
        cores: in FP32 as one TF32 product of operands rounded to TF32 (the network's
        force error against float64 5.5e-4 of the force RMS on 1ENH, demo model;
        asserted at most 1e-3 in the tests), in 16-bit with the calibrated scales.
    csr_aggregation : bool
        Destination-grouped segment reductions instead of scatter-add.
    fused_update : bool
        Node-level linear layers in Triton kernels: the interaction update's activation
        and linear layer in one, and the convolution's input and output layers and the
        output MLP; for a CGTensorProduct, its radial MLPs (one row per edge, activation
        fused on load). In FP32 each product is three TF32 tensor-core products with the
        weights split once when packed (relative error ~1e-6, like FP32's).
    mlp_precision : str
        ``"fp32"``, ``"fp16"`` or ``"bf16"`` for the filter, update and output
        MLPs (a CGTensorProduct's radial MLPs with ``fused_update``; channel-wise scaled
        weights, FP32 accumulation).
    tabulated_filter : bool
        Read each block's filter ``W(d) = MLP(basis(d))·C(d)`` from a cubic Hermite
        table built from the loaded weights, instead of evaluating the MLP per edge
        (replaces the fused message-passing kernel; needs no filter MLP at all).
    cuda_graph : bool
        Capture a whole MD step (neighbour list rebuilt with static shapes, forces,
        integrator) as a CUDA graph and replay it (CUDA devices only).
    fused_pair_search : bool
        Find the SchNet graph afresh at every step with Triton passes over each replica's
        bead pairs that write the edges already sorted, with both CSR layouts
        (`kernels.pair_search_csr`), instead of a Verlet list or dense distance blocks
        followed by a cutoff filter and a CSR build.
    fused_integrator : bool
        Langevin (BAOAB) steps in two Triton kernels: the kicks, drifts and friction-noise
        update in one, the last kick with the per-replica blow-up check and the freezing of
        failed replicas in the other (`kernels.langevin`), instead of some fifty tensor
        operations.
    pair_filter : bool
        Evaluate the filter network once per unordered pair and give it to both directions.
        On the paths that run the filter network on edge tensors: half the filter rows
        (`workbench.model.edge_pairs`). With ``fused_message_passing`` on the engine's
        symmetric graphs: ``W`` and ``dW/dd`` of every pair from dense tensor-core tiles
        (`kernels.pair_filter`), read by the convolution kernels, whose backward then needs
        no GEMM (without it, or where one block's rows would exceed
        ``kernels.pair_filter.ROWS_BYTES``, the fused kernel recomputes the filter per edge
        and nothing of the filter is written). The tabulated filter ignores it.
    """

    fused_radial_basis: bool = False
    fused_message_passing: bool = False
    csr_aggregation: bool = False
    fused_update: bool = False
    mlp_precision: str = "fp32"
    tabulated_filter: bool = False
    cuda_graph: bool = False
    fused_pair_search: bool = False
    fused_integrator: bool = False
    pair_filter: bool = False

    def __post_init__(self):
        if self.mlp_precision not in PRECISIONS:
            raise ValueError(
                f"mlp_precision must be one of {PRECISIONS}, got {self.mlp_precision!r}"
            )

    @classmethod
    def baseline(cls) -> KernelOptions:
        """Everything off: the PyTorch reference path."""
        return cls()

    @classmethod
    def all_on(
        cls, mlp_precision: str = "fp32", tabulated_filter: bool = False, cuda_graph: bool = False
    ) -> KernelOptions:
        """Every fused technique of the flash engine on (tables and graphs optional)."""
        return cls(mlp_precision=mlp_precision, tabulated_filter=tabulated_filter,
                   cuda_graph=cuda_graph, **dict.fromkeys(ALL_FUSED, True))

    @classmethod
    def techniques(cls) -> tuple[str, ...]:
        """Names of the on/off switches (every field but ``mlp_precision``)."""
        return tuple(f.name for f in fields(cls) if f.name != "mlp_precision")

    @classmethod
    def preset(cls, name: str, mlp_precision: str = "fp32") -> KernelOptions:
        """The options of a named configuration of :data:`PRESETS`.

        Raises
        ------
        ValueError
            ``name`` is not a preset; the message lists the presets.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown kernel preset {name!r}; presets: {', '.join(PRESETS)}")
        return cls(mlp_precision=mlp_precision, **dict.fromkeys(PRESETS[name], True))

    @classmethod
    def parse(cls, spec: str) -> KernelOptions:
        """The options of a configuration name: a preset of :data:`PRESETS`, or presets and
        technique names joined by ``+`` or ``,`` (``tabulated_filter+cuda_graph``,
        ``all+pair_filter``), followed by ``-fp16`` or ``-bf16`` for the MLP precision
        (``all+tables-fp16``) or not (FP32).

        Raises
        ------
        ValueError
            A name is neither a preset nor a technique; the message lists both.
        """
        base, _, precision = spec.strip().rpartition("-")
        if not (base and precision in PRECISIONS):
            base, precision = spec.strip(), "fp32"
        if base in PRESETS:
            return cls.preset(base, precision)
        names = [n.strip() for n in re.split(r"[+,]", base) if n.strip()]
        switches = [s for n in names for s in PRESETS.get(n, (n.replace("-", "_"),))]
        unknown = [s for s in switches if s not in cls.techniques()]
        if unknown or not names:
            raise ValueError(
                f"unknown kernel technique(s) {unknown or [spec]}: give a preset "
                f"({', '.join(PRESETS)}) or presets and techniques joined by '+' "
                f"({', '.join(cls.techniques())}), optionally followed by -fp16 or -bf16"
            )
        return cls(mlp_precision=precision, **dict.fromkeys(switches, True))

    @property
    def is_baseline(self) -> bool:
        """True when no fused technique is switched on."""
        return self == KernelOptions()

    def enabled(self) -> list[str]:
        """Names of the techniques switched on."""
        on = [f.name for f in fields(self) if f.type == "bool" and getattr(self, f.name)]
        if self.mlp_precision != "fp32":
            on.append(f"mlp_{self.mlp_precision}")
        return on

    def to_dict(self) -> dict:
        """Plain-JSON form."""
        return asdict(self)
