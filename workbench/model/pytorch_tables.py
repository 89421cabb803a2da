"""Tabulated filters in PyTorch: the ``tabulated_filter`` technique where Triton cannot run.

Each interaction block's filter ``W(d) = MLP(basis(d)) C(d)`` is read from the block's
cubic Hermite table (`workbench.model.fused_schnet.build_filter_tables`, the same tables as
the Triton path, ``TABLE_SPACING`` apart) instead of running the filter network per edge.
The rest of CGSchNet (embedding, ``lin1``, ``lin2``, update, output network) is the
reference path's modules, differentiated by autograd.

Once per force evaluation, `table_pairs` takes one direction of every pair ``(a, b)`` of
the graph within the cutoff (half the directed edges: both directions share ``W(d_ab)``),
sorts the pairs by length (consecutive pairs then read neighbouring table rows: 0.3 ms less
per block on CLN025 x 8, for 0.4 ms of sorting per evaluation) and finds where each reads
the table: the rows ``4 k + m`` of its interval ``k`` and their weights ``t^m``
(``t = d/h - k``), shared by all blocks. Then per block, chunk by chunk (`CHUNK_BYTES`):

* ``W`` of the chunk's pairs in one ``embedding_bag`` over `CubicRows` (row ``4 k + m``
  holds ``c_m``, and in the backward also ``(m + 1) c_{m+1} / h``, so the same weighted sum
  gives ``[W | W']``);
* forward: ``u += xs[sender] * W`` for both directions: one gather, one product and one
  ``index_add_`` of ``[2C, F]`` rows;
* backward (analytic, no autograd through the table): ``grad_xs`` by the same three steps
  with ``grad_u``, and ``dE/dd_ab = sum_f W'_f (grad_u[a] xs[b] + grad_u[b] xs[a])_f``.
  Autograd takes the length gradients to the positions.

Forces are therefore exactly ``-dE/dr`` of the tabulated model (checked by finite
differences in float64); the table's error against the network is that of the Triton path
(docs/decisions/0004-table-spacing.md): on CLN025 x 8 after 200 steps
(``python -m benchmarks.force_error --protein cln025 --replicas 8 --configs tabulated_filter
--device cpu``) the network's forces are 4.4e-6 (demo model) and 3.5e-6 (shipped model)
off the exact network's, relative RMS. Second derivatives are not provided (training uses
the reference path). Speed: CLN025 x 8 on one core of an AMD EPYC, 574-594 timestep·mol/s
against 87-94 for the reference path (``OMP_NUM_THREADS=1 workbench bench --proteins cln025
--replicas 8 --configs baseline,tabulated_filter --device cpu``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as nnf
from torch.autograd.function import once_differentiable

from kernels.tabulated import FilterTable
from workbench.neighbors import Graph

__all__ = ["CubicRows", "PairChunk", "TablePairs", "cubic_coefficients", "cubic_lookup",
           "cubic_rows", "table_pairs", "pair_filters", "pair_cfconv", "table_node_energies"]


@dataclass(frozen=True)
class CubicRows:
    """A `FilterTable` as the cubics' coefficient rows, laid out for ``embedding_bag``.

    Attributes
    ----------
    values : Tensor [4 (G-1), F]
        Row ``4 k + m``: ``c_m`` of interval ``k`` (``c2``, ``c3`` rescaled from the stored
        float16 exactly, as ``kernels.tabulated.evaluate_table`` does).
    values_and_slopes : Tensor [4 (G-1), 2 F]
        Row ``4 k + m``: ``[c_m | (m + 1) c_{m+1} / h]`` (``c_4 = 0``), so that the sums
        weighted by ``t^m`` are ``[W(d) | W'(d)]``.
    spacing : float
        ``h`` (Å).
    cutoff : float
        ``r_c`` (Å); ``W = 0`` for ``d >= r_c``.
    """

    values: torch.Tensor
    values_and_slopes: torch.Tensor
    spacing: float
    cutoff: float

    @property
    def num_intervals(self) -> int:
        """``G - 1``."""
        return self.values.shape[0] // 4


def cubic_coefficients(table: FilterTable, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The stored cubics as ``[G - 1, 4, F]`` in ``dtype``: ``[k, m]`` is ``c_m`` of interval
    ``k`` (``c2``, ``c3`` rescaled from the stored float16 exactly, as
    ``kernels.tabulated.evaluate_table`` does)."""
    c0, c1 = table.coeffs01.to(dtype).unbind(1)
    c2, c3 = (table.coeffs23.to(dtype) * table.scale23.to(dtype)).unbind(1)
    return torch.stack([c0, c1, c2, c3], 1)


def cubic_lookup(u: torch.Tensor, intervals: int,
                 first_interval: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Where ``embedding_bag`` reads piecewise cubics at grid coordinates ``u``, and how.

    Parameters
    ----------
    u : torch.Tensor, shape (M,), float
        Coordinates in units of the spacing (``d / h``); clamped to ``[0, intervals]``, so a
        read beyond either end holds the end's value with zero slope. May require grad.
    intervals : int
        ``G − 1`` of the table.
    first_interval : torch.Tensor, shape (M,), int64, optional
        Row offset of each read's table, in intervals (say, ``n (G − 1)`` for network
        ``n`` of tables stacked as ``[P, G − 1, 4, F]``).

    Returns
    -------
    lookup : torch.Tensor, shape (M, 4), int64
        Rows ``4 (first_interval + k) + m`` of the coefficient rows (`cubic_coefficients`
        flattened), ``k`` the interval of ``u``.
    weights : torch.Tensor, shape (M, 4), ``u``'s dtype
        ``t^m`` with ``t = u − k``, differentiable in ``u`` (the interpolant's exact
        derivative).
    """
    u = u.clamp(0.0, intervals)
    k = u.detach().floor().long().clamp(max=intervals - 1)
    t = (u - k.to(u.dtype))[:, None]
    weights = torch.cat([torch.ones_like(t), t, t * t, t * t * t], 1)
    rows = k if first_interval is None else first_interval + k
    return 4 * rows[:, None] + torch.arange(4, device=u.device), weights


def cubic_rows(table: FilterTable, dtype: torch.dtype = torch.float32) -> CubicRows:
    """`CubicRows` of a table, in ``dtype`` (float32 for MD, float64 for checks)."""
    values = cubic_coefficients(table, dtype)
    c1, c2, c3 = values[:, 1], values[:, 2], values[:, 3]
    slopes = torch.stack([c1, 2.0 * c2, 3.0 * c3, torch.zeros_like(c3)], 1) / table.spacing
    width = table.num_features
    return CubicRows(values.reshape(-1, width).contiguous(),
                      torch.cat([values, slopes], 2).reshape(-1, 2 * width).contiguous(),
                      table.spacing, table.cutoff)


#: Bytes of one ``[2C, F]`` row block of a chunk of ``C`` pairs (both directions). The
#: per-edge products run chunk by chunk so that their operands stay in a core's L2 cache:
#: on CLN025 x 8 (F = 128, 8,068 pairs, one thread of an AMD EPYC with 1 MiB L2 per core)
#: one block's forward and backward take 2.8-3.3 ms in chunks of 1,024 or 2,048 pairs
#: against 11-18 ms on whole ``[2P, F]`` tensors.
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class PairChunk:
    """``C`` pairs ``(a, b)``: their messages and their table lookups.

    Attributes
    ----------
    receivers : Tensor, int64 [2C]
        ``[a, b]``: the node each directed edge's message goes into.
    senders : Tensor, int64 [2C]
        ``[b, a]``: where each message comes from.
    lookup : Tensor, int64 [C, 4]
        Rows ``4 k + m`` (``m = 0 .. 3``) of `CubicRows` for the interval ``k`` of ``d_ab``.
    weights : Tensor, float [C, 4]
        ``t^m`` with ``t = d_ab / h - k``.
    """

    receivers: torch.Tensor
    senders: torch.Tensor
    lookup: torch.Tensor
    weights: torch.Tensor


@dataclass(frozen=True)
class TablePairs:
    """The unordered pairs of a symmetric graph within the cutoff, in chunks.

    Attributes
    ----------
    dist : Tensor, float [P]
        ``|r_a - r_b|`` (differentiable in the positions), all ``< cutoff``.
    bounds : list of (int, int)
        ``[start, end)`` of each chunk in ``dist``.
    chunks : list of PairChunk
    """

    dist: torch.Tensor
    bounds: list
    chunks: list


def table_pairs(pos: torch.Tensor, graph: Graph, grid: CubicRows,
                chunk: int = 1024) -> TablePairs:
    """The pairs of ``graph`` closer than the table's cutoff, and where each reads the table.

    Parameters
    ----------
    pos : Tensor, float [N, 3]
        Flattened positions of all replicas (may require grad).
    graph : Graph
        Symmetric edges (every graph a `NeighborList` returns: exact, candidates within the
        skin, fixed-capacity with padding, or searched).
    grid : CubicRows
        Any table of the model (all share spacing and cutoff); pairs at or beyond its
        cutoff are left out (their filter is zero).
    chunk : int
        Pairs per chunk ``C``.

    Returns
    -------
    TablePairs
        Sorted by length, so that consecutive pairs read neighbouring table rows (the
        edge ``src < dst`` of the graph stands for its pair). The lookups are computed once
        for every block, forward and backward.
    """
    keep = graph.src < graph.dst  # padding slots (src = dst = N) drop out too
    if graph.valid is not None:
        keep &= graph.valid
    a, b = graph.dst[keep], graph.src[keep]
    with torch.no_grad():
        d2 = ((pos[a] - pos[b]) ** 2).sum(-1)
        inside = torch.nonzero(d2 < grid.cutoff**2).squeeze(1)
        inside = inside[torch.argsort(d2[inside])]
    a, b = a[inside], b[inside]
    dist = torch.linalg.vector_norm(pos.index_select(0, a) - pos.index_select(0, b), dim=-1)
    last = grid.num_intervals
    x = (dist.detach() / grid.spacing).clamp(max=last)
    k = x.floor().long().clamp(max=last - 1)
    t = (x - k.to(x.dtype))[:, None]
    weights = torch.cat([torch.ones_like(t), t, t * t, t * t * t], 1)
    lookup = 4 * k[:, None] + torch.arange(4, device=k.device)
    bounds = [(s, min(s + chunk, a.numel())) for s in range(0, a.numel(), chunk)]
    chunks = [PairChunk(torch.cat([a[s:e], b[s:e]]), torch.cat([b[s:e], a[s:e]]),
                        lookup[s:e], weights[s:e]) for s, e in bounds]
    return TablePairs(dist, bounds, chunks)


def pair_filters(rows: CubicRows, chunk: PairChunk, slopes: bool) -> torch.Tensor:
    """``W(d)`` (``slopes=False``: ``[C, F]``) or ``[W(d) | W'(d)]`` (``[C, 2F]``) of a chunk's
    pairs, in ``rows``' dtype (one ``embedding_bag``)."""
    table = rows.values_and_slopes if slopes else rows.values
    return nnf.embedding_bag(chunk.lookup, table, mode="sum",
                             per_sample_weights=chunk.weights.to(table.dtype))


class _PairCFConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dist, xs, pairs, rows):
        width = xs.shape[1]
        u = xs.new_zeros(xs.shape)
        for chunk in pairs.chunks:
            messages = xs.index_select(0, chunk.senders).view(2, -1, width)
            messages *= pair_filters(rows, chunk, slopes=False)
            u.index_add_(0, chunk.receivers, messages.view(-1, width))
        ctx.save_for_backward(xs)
        ctx.pairs, ctx.rows = pairs, rows
        return u

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_u):
        (xs,) = ctx.saved_tensors
        pairs, width = ctx.pairs, xs.shape[1]
        lengths = ctx.needs_input_grad[0]
        grad_dist = grad_u.new_empty(pairs.dist.shape) if lengths else None
        grad_xs = xs.new_zeros(xs.shape) if ctx.needs_input_grad[1] else None
        for (s, e), chunk in zip(pairs.bounds, pairs.chunks, strict=True):
            w = pair_filters(ctx.rows, chunk, slopes=lengths)
            received = grad_u.index_select(0, chunk.receivers).view(2, -1, width)
            if lengths:  # sum_f W'_f (grad_u[a] xs[b] + grad_u[b] xs[a])_f
                sent = xs.index_select(0, chunk.senders).view(2, -1, width)
                both = torch.mul(received[0], sent[0]).addcmul_(received[1], sent[1])
                grad_dist[s:e] = both.mul_(w[:, width:]).sum(-1)
            if grad_xs is not None:
                received *= w[:, :width]
                grad_xs.index_add_(0, chunk.senders, received.view(-1, width))
        return grad_dist, grad_xs, None, None


def pair_cfconv(xs: torch.Tensor, pairs: TablePairs, rows: CubicRows) -> torch.Tensor:
    """Continuous-filter convolution with a tabulated filter over pairs.

    Parameters
    ----------
    xs : Tensor, float [N, F]
        ``lin1(h)``.
    pairs : TablePairs
    rows : CubicRows
        The block's table, in ``xs``' dtype.

    Returns
    -------
    Tensor, float [N, F]
        ``u_a = sum_b xs[b] * W(d_ab)`` over the pairs (both directions). Gradients flow to
        ``xs`` and to ``pairs.dist`` (the exact derivative of the interpolant), not twice
        (no ``create_graph``).
    """
    return _PairCFConv.apply(pairs.dist, xs, pairs, rows)


def table_rows(schnet, dtype: torch.dtype, device: torch.device) -> list[CubicRows]:
    """Every block's `CubicRows`, built once per set of weights, dtype and device and kept
    on the module (the tables of `build_filter_tables`)."""
    from workbench.model.fused_schnet import build_filter_tables, weights_key

    key = (weights_key(schnet), dtype, device)
    cached = getattr(schnet, "_table_rows", None)
    if cached is None or cached[0] != key:
        cached = (key, [cubic_rows(t, dtype) for t in build_filter_tables(schnet, device)])
        schnet._table_rows = cached
    return cached[1]


def table_node_energies(schnet, pos: torch.Tensor, types: torch.Tensor,
                        graph: Graph) -> torch.Tensor:
    """Per-node energies ``[N]`` of a CGSchNet with every filter read from its table.

    Parameters
    ----------
    schnet : CGSchNet
    pos : Tensor, float [N, 3]
    types : Tensor, int64 [N]
    graph : Graph
        Symmetric SchNet graph (edges at or beyond the cutoff are dropped here).

    Returns
    -------
    Tensor, float [N]
    """
    rows = table_rows(schnet, pos.dtype, pos.device)
    chunk = max(CHUNK_BYTES // (2 * schnet.config.filters * pos.element_size()), 1)
    pairs = table_pairs(pos, graph, rows[0], chunk)
    h = schnet.embedding_layer(types)
    for block, block_rows in zip(schnet.interaction_blocks, rows, strict=True):
        u = pair_cfconv(block.conv.lin1(h), pairs, block_rows)
        h = h + block.lin(block.activation(block.conv.lin2(u)))
    return schnet.output_network(h).squeeze(-1)
