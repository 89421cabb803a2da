"""Tabulated radial weights of a CGTensorProduct (the ``tabulated_filter`` switch for
architecture ``nequip``).

Each interaction block ``b`` weighs its tensor-product paths per edge by
``w_b(d) = R_b(e(d)) · C(d)`` (`workbench.model.tensor_product.TensorProductBlock.edge_weights`):
a function of the edge length alone. One cubic Hermite table holds every block's ``P_b``
columns side by side on a uniform grid over ``[0, r_c]`` (`kernels.tabulated.tabulate_within`):
values and exact slopes from forward-mode AD of the exact networks in float64, the number
of intervals doubled from `FIRST_INTERVALS` until the table's largest error at the
intervals' midpoints is at most `TABLE_TOLERANCE` of the largest ``|w_b|`` of each block,
or `MAX_INTERVALS` is reached; the error measured is kept (`RadialTables.error`) and
asserted in the tests. The coefficients are the unrounded float64 cubics cast to the
evaluation dtype (the Triton kernels' float16 ``c2``, ``c3`` would make the values jump at
the grid points), so the interpolant is C1 and its derivative exact: forces are
``−∂E/∂r`` of the tabulated model.

Per force evaluation, once for all blocks (`table_reads`), and per block
(`tabulated_weights`), in one of two ways:

* Triton (float32 on a GPU, or under the interpreter): `kernels.table_read` reads each
  edge's row of the block's table from its length and writes ``[E, P_b]`` once; its
  backward reads ``dL/dw`` once and writes one length gradient per edge.
* PyTorch (anywhere else): each edge's interval ``k`` and ``t = d/h − k``
  (`workbench.model.pytorch_tables.cubic_lookup`), the weights ``[1, t, t², t³]`` set to
  zero at or beyond the cutoff, then one ``embedding_bag`` over the block's coefficient
  rows; autograd differentiates through ``t``.

Either way edges at or beyond the cutoff and padding slots get exactly zero weights and
no gradient. What the network's path runs per edge and block (three linear layers, two
activations, the envelope product, and their backward) becomes one table read and its
backward. No host synchronisation (capturable); the tables are rebuilt when any
parameter changes (`workbench.model.fused_schnet.cached_packing`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as nnf

from kernels.tabulated import tabulate_within
from workbench.model.pytorch_tables import cubic_lookup

__all__ = ["RadialTables", "EdgeReads", "radial_tables", "table_reads", "tabulated_weights",
           "TABLE_TOLERANCE", "FIRST_INTERVALS", "MAX_INTERVALS"]

#: Largest error of a tabulated weight allowed by the grid choice, relative to the largest
#: ``|w_b|`` of its block on the grid.
TABLE_TOLERANCE = 1e-6
#: Intervals of the first grid tried, and the most tried.
FIRST_INTERVALS = 64
MAX_INTERVALS = 8192


@dataclass
class RadialTables:
    """Every block's radial weights tabulated.

    Attributes
    ----------
    key : tuple
        ``((dtype, device), weights_key)`` of the model when built (`cached_packing`).
    coefficients : list of torch.Tensor, each shape (G − 1, 4, P_b), the evaluation dtype
        Block ``b``'s ``c_m`` of interval ``k`` at ``[k, m]`` (contiguous: viewed as
        ``[4 (G − 1), P_b]`` rows, row ``4 k + m``, by the PyTorch path).
    spacing : float
        ``h`` (Å).
    cutoff : float
        ``r_c = (G − 1) h`` (Å); the weights are zero from there on.
    error : float
        Largest ``|w_table − w|`` at the intervals' midpoints over the largest ``|w_b|``
        (the worst block), measured in float64 against the exact networks.
    """

    key: tuple
    coefficients: list[torch.Tensor]
    spacing: float
    cutoff: float
    error: float

    @property
    def intervals(self) -> int:
        """``G − 1``."""
        return self.coefficients[0].shape[0]


@dataclass
class EdgeReads:
    """How every edge reads the tables, shared by all blocks: its length (the Triton
    kernel), or its coefficient rows and their weights ``[1, t, t², t³]`` (PyTorch).

    Attributes
    ----------
    lengths : torch.Tensor, shape (E,), or None
    lookup : torch.Tensor, shape (E, 4), int64, or None
    weights : torch.Tensor, shape (E, 4), or None
        Zero at or beyond the cutoff.
    """

    lengths: torch.Tensor | None = None
    lookup: torch.Tensor | None = None
    weights: torch.Tensor | None = None

    def permuted(self, perm: torch.Tensor) -> EdgeReads:
        """The same reads for the edges in the order ``perm`` (say, a CSR layout's)."""
        return EdgeReads(*(None if t is None else t.index_select(0, perm)
                           for t in (self.lengths, self.lookup, self.weights)))


def _exact_weights(model, device: torch.device):
    """``w(d)``: float64 distances ``[G]`` to every block's weights ``[G, Σ_b P_b]`` from
    float64 copies of ``model``'s basis, envelope and radial networks; and each block's
    columns."""
    def exact(module):
        return copy.deepcopy(module).to(device=device, dtype=torch.float64)

    basis, envelope = exact(model.rbf_layer), exact(model.envelope)
    radials = [exact(block.radial) for block in model.blocks]
    starts = torch.tensor([0] + [block.tp.weight_numel for block in model.blocks]).cumsum(0)
    columns = [slice(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]

    def weights(d):  # R_b(e(d)) · C(d), as TensorProductBlock.edge_weights
        rbf, cut = basis(d), envelope(d)[:, None]
        return torch.cat([radial(rbf) * cut for radial in radials], 1)

    return weights, columns


def radial_tables(model, dtype: torch.dtype, device: torch.device) -> RadialTables:
    """``model``'s `RadialTables` with coefficients in ``dtype`` on ``device``, built once
    per set of weights (kept on the model until a parameter changes)."""
    from workbench.model.fused_schnet import cached_packing

    def pack(key):
        weights, columns = _exact_weights(model, device)
        table, coefficients, error = tabulate_within(
            weights, model.cutoff, TABLE_TOLERANCE, (FIRST_INTERVALS, MAX_INTERVALS),
            device=device, groups=columns, rounded=False)
        coefficients = coefficients.to(dtype)  # [G-1, 4, Σ P_b]
        return RadialTables(key, [coefficients[:, :, span].contiguous() for span in columns],
                            table.spacing, table.cutoff, error)

    return cached_packing(model, "_radial_tables", (dtype, device), pack)


def table_reads(tables: RadialTables, d: torch.Tensor, kernel: bool) -> EdgeReads:
    """Where and how every edge reads the tables.

    Parameters
    ----------
    tables : RadialTables
    d : torch.Tensor, shape (E,), float
        Edge lengths (may require grad); padding slots longer than the cutoff.
    kernel : bool
        Read with `kernels.table_read` (float32 ``d`` and tables), else in PyTorch.
    """
    if kernel:
        return EdgeReads(lengths=d)
    lookup, weights = cubic_lookup(d / tables.spacing, tables.intervals)
    return EdgeReads(lookup=lookup, weights=weights * (d < tables.cutoff).to(d.dtype)[:, None])


def tabulated_weights(tables: RadialTables, block: int, reads: EdgeReads) -> torch.Tensor:
    """One block's path weights per edge from its table.

    Parameters
    ----------
    tables : RadialTables
    block : int
        The block ``b``.
    reads : EdgeReads
        `table_reads` of the edges (in any order).

    Returns
    -------
    torch.Tensor, shape (E, P_b), the tables' dtype
        ``w_b(d)`` of each edge, differentiable in ``d``.
    """
    coefficients = tables.coefficients[block]
    if reads.lengths is not None:
        from kernels import table_read

        return table_read(reads.lengths, coefficients, tables.spacing)
    rows = coefficients.view(-1, coefficients.shape[2])
    return nnf.embedding_bag(reads.lookup, rows, mode="sum", per_sample_weights=reads.weights)
