"""Compressed embedding networks of a CGDeepPotential: every embedding network read from a
cubic Hermite table (the ``tabulated_filter`` switch for architecture ``dp``).

DeePMD's model compression, on the engine's tabulated-filter machinery
(`kernels.tabulated.tabulate_filter`, `kernels.tabulated.build_filter_table`): each
embedding network ``g_n`` (``n`` a type pair, or a neighbour type with ``type_one_side``)
is a function of one scalar, the network's input ``x`` per edge
(`CGDeepPotential.embedding_input`). One `FilterTable` holds all ``P`` networks side by
side (``F = P · M1`` feature columns, network ``n`` in columns ``n M1 .. (n+1) M1``) on a
uniform grid over ``u = x − x_lo`` in ``[0, x_hi − x_lo]``, where ``[x_lo, x_hi]`` is the
range of ``x`` reachable for distances in ``[TABLE_MIN_DISTANCE, r_c]`` around a centre of
any type (`CGDeepPotential.embedding_input_range`; with ``sel``, ``x`` is normalised by the
centre type's statistics and the range holds every empty slot's input ``x(r_c)``).
Values and slopes come from forward-mode AD of the exact networks in float64; the stored
cubics are C1 and their derivative is exact for the interpolant, so forces stay ``−∂E/∂r``
of the tabulated model.

Grid choice (`build_embedding_table`): the number of intervals doubles from
`FIRST_INTERVALS` until the largest error of the stored table against the exact networks,
at every interval's midpoint (where the Hermite remainder ``t²(1−t)² h⁴ g''''/24`` peaks),
is at most `TABLE_TOLERANCE` of the largest ``|g|`` on the grid, or `MAX_INTERVALS` is
reached; the error measured is kept (`EmbeddingTable.error`) and asserted in the tests.
Inputs beyond the range are clamped to it: a pair closer than `TABLE_MIN_DISTANCE` reads
``g(x_hi)`` with zero slope (DeePMD's compressed models also hold the embedding constant
far beyond their table). Edges at or beyond the cutoff read ``g(x(r_c))``, multiplied by
``R̃ = 0`` as on the exact path (with ``sel``, masked; the empty slots' embeddings are read
from the same table, `CGDeepPotential.empty_slots`).

Per edge (`tabulated_embedding`, PyTorch, no host synchronisation, so capturable): the
interval ``k`` and ``t`` of ``u``, then one ``embedding_bag`` over the rows of the edge's
network (`cubic_coefficients`, laid out ``[P, G − 1, 4, M1]``) weighted by
``[1, t, t², t³]``; autograd differentiates through ``t`` (the rows get no gradient). The
tables are rebuilt when any parameter of the model changes (`cached_packing`, keyed on
`weights_key` as CGSchNet's packed weights are).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as nnf

from kernels.tabulated import FilterTable, tabulate_within
from workbench.model.fused_schnet import cached_packing
from workbench.model.pytorch_tables import cubic_coefficients, cubic_lookup

__all__ = ["EmbeddingTable", "build_embedding_table", "embedding_table", "tabulated_embedding",
           "TABLE_MIN_DISTANCE", "TABLE_TOLERANCE"]

#: Closest pair distance the tables cover exactly, Å (the engine's closest bonded beads sit
#: 1.2 Å apart, and 0.3 Å of noise on 1ENH × 16 brings pairs to 0.2 Å; below, the
#: embedding is held at its value at this distance).
TABLE_MIN_DISTANCE = 0.1
#: Largest error of a tabulated embedding value allowed by the grid choice, relative to the
#: largest ``|g|`` of all networks on the grid.
TABLE_TOLERANCE = 1e-6
#: Intervals of the first grid tried, and the most tried.
FIRST_INTERVALS = 32
MAX_INTERVALS = 4096


@dataclass
class EmbeddingTable:
    """Every embedding network of one model tabulated, with the rows the PyTorch path reads.

    Attributes
    ----------
    key : tuple
        ``((dtype, device), weights_key)`` of the model when built (`cached_packing`).
    table : FilterTable
        ``F = P · M1`` columns over ``u = x − lower`` in ``[0, table.cutoff]`` (the kernels'
        layout: ``coeffs01`` float32 ``[G − 1, 2, P · M1]``, ``coeffs23`` float16, ``scale23``
        float32 ``[P · M1]``).
    rows : torch.Tensor, shape (P · (G − 1) · 4, M1), the evaluation dtype
        Row ``4 ((G − 1) n + k) + m``: ``c_m`` of network ``n`` on interval ``k``.
    lower : float
        ``x_lo``, where the grid starts.
    error : float
        Largest ``|g_table − g|`` at the intervals' midpoints over the largest ``|g|``,
        measured in float64 against the exact networks.
    networks : int
        ``P``.
    """

    key: tuple
    table: FilterTable
    rows: torch.Tensor
    lower: float
    error: float
    networks: int

    @property
    def intervals(self) -> int:
        """``G − 1``."""
        return self.table.num_intervals

    @property
    def width(self) -> int:
        """``M1``."""
        return self.rows.shape[1]


def build_embedding_table(model, device: torch.device) -> tuple[FilterTable, float, float]:
    """Tabulate every embedding network of ``model`` (a CGDeepPotential) on the coarsest
    grid that meets `TABLE_TOLERANCE` (see the module docstring).

    Returns
    -------
    table : FilterTable
        ``P · M1`` columns over ``u = x − lower``.
    lower : float
        ``x_lo``.
    error : float
        The measured midpoint error relative to the largest ``|g|``.
    """
    exact = copy.deepcopy(model).to(device=device, dtype=torch.float64)
    lower, upper = model.embedding_input_range()
    nets, width = model.pair_nets, model.config.embedding_widths[-1]

    def networks(u):  # [G] -> [G, P·M1]
        keys = torch.arange(nets, device=device).repeat_interleave(u.numel())
        g = exact.embedding((lower + u).repeat(nets), keys).view(nets, u.numel(), width)
        return g.transpose(0, 1).reshape(u.numel(), nets * width)

    table, _, error = tabulate_within(networks, upper - lower, TABLE_TOLERANCE,
                                   (FIRST_INTERVALS, MAX_INTERVALS), device=device)
    return table, lower, error


def embedding_table(model, dtype: torch.dtype, device: torch.device) -> EmbeddingTable:
    """The model's `EmbeddingTable` with rows in ``dtype`` on ``device``, built once per set
    of weights (kept on the model until a parameter changes)."""

    def pack(key):
        table, lower, error = build_embedding_table(model, device)
        nets = model.pair_nets
        coefficients = cubic_coefficients(table, dtype)  # [G-1, 4, P·M1]
        rows = coefficients.view(table.num_intervals, 4, nets, -1).permute(2, 0, 1, 3)
        return EmbeddingTable(key, table, rows.reshape(-1, rows.shape[-1]).contiguous(),
                              lower, error, nets)

    return cached_packing(model, "_embedding_table", (dtype, device), pack)


def tabulated_embedding(table: EmbeddingTable, x: torch.Tensor,
                        net: torch.Tensor) -> torch.Tensor:
    """``G``: each edge's embedding read from its network's table.

    Parameters
    ----------
    table : EmbeddingTable
        Rows in ``x``'s dtype.
    x : torch.Tensor, shape (E,), float32 or float64
        The embedding networks' input per edge (may require grad); clamped to the table.
    net : torch.Tensor, shape (E,), int64
        The edge's network, in ``[0, P)``.

    Returns
    -------
    torch.Tensor, shape (E, M1), ``x``'s dtype
        Differentiable in ``x`` (the exact derivative of the interpolant).
    """
    lookup, weights = cubic_lookup((x - table.lower) / table.table.spacing, table.intervals,
                                   net * table.intervals)
    return nnf.embedding_bag(lookup, table.rows, mode="sum", per_sample_weights=weights)
