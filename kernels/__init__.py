"""Triton kernels for CGSchNet molecular dynamics, each beside its PyTorch reference.

Pure tensor APIs; this package never imports ``workbench``. Every op exists twice with the
same signature: a Triton implementation (fused, deterministic, no atomics in reductions, no
host synchronisation) and a PyTorch reference. `OPS` maps an op name to both, so the model
can choose at run time::

    from kernels import get_op, triton_available
    cfconv = get_op("cfconv")                # Triton when available, else the reference
    cfconv_ref = get_op("cfconv", use_triton=False)

Gradient contract of the fused ops: they are built for molecular dynamics, where only
``d(energy)/d(positions)`` is needed. Their backward passes return gradients for positions
and for features (and anything upstream of those) only - never for weights, biases or
basis parameters; passing weights that require grad while autograd records raises a
``ValueError``. Training uses the reference ops (plain autograd, all gradients).

Choice is explicit (an argument); no environment variable switches behaviour. The only
environment variable read is ``TRITON_INTERPRET`` (tests on CPU), and only to fit the
interpreter (see `kernels._triton`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernels._triton import triton_available
from kernels.bonded_terms import (
    angle_energies,
    angle_energies_reference,
    dihedral_energies,
    dihedral_energies_reference,
)
from kernels.cfconv import FilterParams, cfconv, cfconv_reference, pack_filter
from kernels.csr import (
    GraphCSR,
    build_csr,
    build_csr_reference,
    build_csr_sorted_pairs,
    valid_edge_mask,
)
from kernels.dp_descriptor import DescriptorSpec, dp_descriptor, dp_descriptor_reference
from kernels.edge_distances import edge_distances, edge_distances_reference
from kernels.egnn_edge import EdgeMLPParams, egnn_edge, egnn_edge_reference, pack_edge_mlp
from kernels.fused_update import linear, linear_reference, tanh_linear, tanh_linear_reference
from kernels.langevin import (
    langevin_drift,
    langevin_drift_reference,
    langevin_finish,
    langevin_finish_reference,
)
from kernels.painn_message import (
    PaiNNFilterParams,
    pack_painn_filter,
    painn_message,
    painn_message_reference,
)
from kernels.pair_filter import (
    PairFilterRows,
    PairLayout,
    pair_filter_rows,
    pair_filter_rows_reference,
    pair_layout,
    pair_layout_reference,
    rows_fit,
)
from kernels.pair_search import PairGraph, pair_search_csr, pair_search_csr_reference
from kernels.pair_terms import PAIR_FORMS, pair_energies, pair_energies_reference
from kernels.quantize import PackedLinear, channel_scales, pack_linear
from kernels.radial_basis import RadialSpec, radial_basis, radial_basis_reference
from kernels.segment_reduce import (
    edge_grad_to_positions,
    edge_grad_to_positions_reference,
    edge_vectors_to_positions,
    edge_vectors_to_positions_reference,
    segment_sum,
    segment_sum_reference,
    signed_segment_sum,
    signed_segment_sum_reference,
)
from kernels.table_read import table_read, table_read_reference
from kernels.tabulated import (
    FilterTable,
    LengthGradient,
    build_filter_table,
    tabulated_cfconv,
    tabulated_cfconv_reference,
)

__all__ = [
    "OPS", "Op", "get_op", "triton_available",
    "GraphCSR", "RadialSpec", "FilterParams", "PackedLinear", "FilterTable",
    "LengthGradient", "EdgeMLPParams", "PaiNNFilterParams",
    "pack_filter", "pack_edge_mlp", "pack_painn_filter", "pack_linear", "channel_scales",
    "valid_edge_mask",
    "build_filter_table",
    "build_csr", "build_csr_sorted_pairs", "radial_basis", "segment_sum",
    "edge_grad_to_positions", "edge_vectors_to_positions", "edge_distances", "cfconv",
    "egnn_edge", "painn_message", "DescriptorSpec", "dp_descriptor",
    "tabulated_cfconv", "linear", "tanh_linear", "pair_energies", "PAIR_FORMS",
    "PairGraph", "pair_search_csr", "angle_energies", "dihedral_energies", "langevin_drift",
    "langevin_finish", "signed_segment_sum", "PairLayout", "PairFilterRows", "pair_layout",
    "pair_filter_rows", "rows_fit", "table_read",
]


@dataclass(frozen=True)
class Op:
    """One operation: its Triton implementation and its PyTorch reference (same signature)."""

    name: str
    triton: Callable
    reference: Callable


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("build_csr", build_csr, build_csr_reference),
        Op("radial_basis", radial_basis, radial_basis_reference),
        Op("segment_sum", segment_sum, segment_sum_reference),
        Op("edge_grad_to_positions", edge_grad_to_positions, edge_grad_to_positions_reference),
        Op("edge_vectors_to_positions", edge_vectors_to_positions,
           edge_vectors_to_positions_reference),
        Op("edge_distances", edge_distances, edge_distances_reference),
        Op("cfconv", cfconv, cfconv_reference),
        Op("egnn_edge", egnn_edge, egnn_edge_reference),
        Op("painn_message", painn_message, painn_message_reference),
        Op("dp_descriptor", dp_descriptor, dp_descriptor_reference),
        Op("tabulated_cfconv", tabulated_cfconv, tabulated_cfconv_reference),
        Op("table_read", table_read, table_read_reference),
        Op("pair_layout", pair_layout, pair_layout_reference),
        Op("pair_filter_rows", pair_filter_rows, pair_filter_rows_reference),
        Op("linear", linear, linear_reference),
        Op("tanh_linear", tanh_linear, tanh_linear_reference),
        Op("pair_energies", pair_energies, pair_energies_reference),
        Op("pair_search_csr", pair_search_csr, pair_search_csr_reference),
        Op("signed_segment_sum", signed_segment_sum, signed_segment_sum_reference),
        Op("angle_energies", angle_energies, angle_energies_reference),
        Op("dihedral_energies", dihedral_energies, dihedral_energies_reference),
        Op("langevin_drift", langevin_drift, langevin_drift_reference),
        Op("langevin_finish", langevin_finish, langevin_finish_reference),
    )
}


def get_op(name: str, use_triton: bool | None = None) -> Callable:
    """The implementation of op ``name``.

    Parameters
    ----------
    name : str
        A key of `OPS`.
    use_triton : bool, optional
        True: the Triton kernel (error if Triton cannot run here); False: the reference;
        None: Triton when `triton_available()`, else the reference.
    """
    op = OPS[name]
    if use_triton is None:
        use_triton = triton_available()
    if use_triton and not triton_available():
        raise RuntimeError(f"Triton kernel for {name!r} requested, but Triton cannot run here "
                           "(needs Triton and a CUDA device, or TRITON_INTERPRET=1)")
    return op.triton if use_triton else op.reference
