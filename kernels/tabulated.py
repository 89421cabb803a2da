"""Tabulated continuous-filter convolution: the filter network replaced by a cubic table.

The filter of an interaction block, ``W(d) = MLP(basis(d)) C(d)`` in ``R^F``, depends on
the scalar distance only. `build_filter_table` turns its values and exact derivatives on a
uniform grid ``d_g = g h`` (``g = 0 .. G-1``, ``(G-1) h = r_c``) into a piecewise cubic
Hermite interpolant, stored per interval ``k`` as the coefficients of the cubic in
``t = d/h - k`` in ``[0, 1)``::

    W(d)  = ((c3 t + c2) t + c1) t + c0
    W'(d) = ((3 c3 t + 2 c2) t + c1) / h          (the derivative of that same cubic)

``W = 0`` for ``d >= r_c``. Forces are the exact gradient of the interpolated energy, so MD
with a table conserves the energy of the interpolated model. The interpolant is C1 (values
and slopes match at the grid points) up to the rounding of the stored coefficients; its
error is ``h^4 max|W''''| / 384`` plus that rounding.

Storage (12 F bytes per interval): ``c0 = W(kh)`` and ``c1 = h W'(kh)`` in float32
(``coeffs01``); ``c2 ~ h^2 W''/2`` and ``c3 ~ h^3 W'''/6`` in float16 (``coeffs23``),
divided by a power of two per feature column (``scale23``) that puts the column's largest
Hermite |c2|, |c3| in ``[2^14, 2^15)``. So nothing overflows (fp16 max 65504, whatever the
filter's magnitude), and values down to ``2^-29`` of the column's largest stay normal (no
precision lost to subnormals; a per-table scale would lose small columns). Scaling by a
power of two is exact: the kernels and `evaluate_table` use the same numbers,
``c = float(q) * s``, and all arithmetic is FP32. ``c2`` is rounded first (relative error
<= 2^-11); ``c3`` is then computed from the stored ``c1``, ``c2`` so that the slope at the
interval's right end, ``(c1 + 2 c2 + 3 c3)/h``, stays the grid slope (up to the rounding
of ``c3``, ~100x below that of ``c2`` at h = 0.005 A). That keeps ``W'``
continuous at the grid points and its error inside an interval at ``2 t (1 - t) |dc2| / h
<= 2^-13 h |W''|``, a quarter of what rounding ``c3`` on its own gives. The value error,
``|dc2| / 3`` at the right end, is of the order of the float32 rounding of ``c0`` at
h = 0.005 A.

For every edge ``e = (src j -> dst i)``::

    u_i = sum_{e: dst_e = i} xs[j] * W(d_e)                          [N, F]

The op takes the edge lengths ``d_e`` (`kernels.edge_distances`, computed once per step and
shared by all blocks) rather than positions, and returns ``dE/dd_e`` in its backward.

Forward (`_tab_fwd_kernel`): one program owns one destination node, i.e. its segment of
the destination-grouped CSR, and one slice of ``FS`` feature columns (`FORWARD_SLICE`; the
slice is the grid's slow axis, so the programs in flight read one slice of the table and
more of its rows hit in L1). It streams the segment in tiles of ``BLOCK_E`` edges. Per
tile: the lengths, interval and ``t``, the four coefficient rows ``[BLOCK_E, FS]`` (one edge
reads ``2 * 4 F + 2 * 2 F = 12 F`` bytes over all slices, 1.5 KiB at F = 128, instead of 16 F
in float32; L2-resident: the table is ``(G-1) * 12 * F`` bytes, 2.9 MiB at G = 2001,
F = 128), Horner, and the product with the gathered ``xs[src]`` columns, added into a
``[BLOCK_E, FS]`` FP32 register accumulator that is summed over its lanes once at the end
and written once: no atomics, deterministic. Edges with ``d >= r_c`` load neither table
rows nor ``xs``. (A one-hot tensor-core reduction over 16 nodes per program, as in
`kernels.cfconv`, was 2.6-3x slower here: see docs/kernels.md.)

Backward (`_tab_bwd_kernel`), given ``grad_u [N, F]``: one program owns one *source* node
``j`` (its segment of the source-grouped CSR) and one feature slice, and keeps that slice
of ``xs[j]`` in registers (both kernels also keep the slice's scales of c2, c3 there). Per
tile it evaluates ``W`` and ``W'`` from the same four coefficient rows and produces both

* ``grad_xs[j] = sum_{e: src_e = j} grad_u[dst_e] * W(d_e)`` (register accumulator as in
  the forward, written once), and
* the slice's part of ``g_e = dE/dd_e = sum_f grad_u[dst_e, f] xs[j, f] W'(d_e, f)``, one
  FP32 scalar per edge and slice; the slices' rows are summed into ``g`` (fixed order).

``g`` is the gradient of the lengths; `kernels.edge_distances` turns the sum over all
blocks into position gradients (deterministic). Blocks that share a `LengthGradient` write
their rows into one buffer, and one kernel sums all of them (no zero fill on a searched
graph, no per-block sums, no adds between blocks). The table gets no gradient.

On a symmetric graph (``symmetric=True``: ``j -> i`` is an edge exactly when ``i -> j`` is,
with the same length) the backward walks the destination layout, as the forward does: the
edges into ``j`` are the reverses of the edges out of ``j``, and each reverse's gradient is
written at the edge visited. The source layout's permutation, and the scattered endpoint,
length and gradient accesses it causes, are gone; on a searched graph
(``slots_are_edges=True``) both kernels also skip the identity permutation, so the
endpoint and length loads and the gradient stores are contiguous (feature rows are still
gathered).

Padding: edges outside every CSR segment (see `kernels.csr`) are never visited.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernels._triton import (
    autotune,
    check_no_grad,
    pick_configs,
    tl,
    torch_to_tl_dtype,
    triton,
)
from kernels.csr import GraphCSR, valid_edge_mask
from kernels.pair_filter import PairFilterRows

__all__ = ["FilterTable", "LengthGradient", "build_filter_table", "tabulate_filter",
           "tabulate_within", "hermite_coefficients", "evaluate_cubics",
           "evaluate_table", "tabulated_cfconv", "tabulated_cfconv_reference"]


@dataclass(frozen=True)
class FilterTable:
    """A filter ``W(d)`` in ``R^F`` as a piecewise cubic on a uniform grid.

    Per interval ``k`` (``d`` in ``[k h, (k+1) h)``) the cubic is
    ``W = ((c3 t + c2) t + c1) t + c0`` with ``t = d/h - k``; ``c0``, ``c1`` are stored in
    float32, ``c2``, ``c3`` in float16 scaled per feature (see the module docstring).

    Attributes
    ----------
    coeffs01 : Tensor, float32 [G - 1, 2, F]
        ``c0``, ``c1`` per interval. Contiguous: an edge's two rows are one 8 F-byte block.
    coeffs23 : Tensor, float16 [G - 1, 2, F]
        ``c2 / scale23``, ``c3 / scale23`` per interval (max-abs per feature about
        ``2^14 .. 2^15``). Contiguous: an edge's two rows are one 4 F-byte block.
    scale23 : Tensor, float32 [F]
        Powers of two: ``c2 = coeffs23[:, 0] * scale23``, ``c3 = coeffs23[:, 1] * scale23``
        (exact in float32).
    spacing : float
        Grid spacing ``h`` (A).
    cutoff : float
        ``r_c = (G - 1) h`` (A); ``W = 0`` for ``d >= r_c``.
    num_features : int
        ``F``.
    """

    coeffs01: torch.Tensor
    coeffs23: torch.Tensor
    scale23: torch.Tensor
    spacing: float
    cutoff: float
    num_features: int

    @property
    def num_intervals(self) -> int:
        """``G - 1``."""
        return self.coeffs01.shape[0]


def hermite_coefficients(values, slopes, spacing: float) -> torch.Tensor:
    """The cubic Hermite interpolant's coefficients per interval, unrounded.

    Parameters
    ----------
    values, slopes : Tensor, float [G, F]
        ``W`` and ``dW/dd`` at the grid points ``g h``.
    spacing : float
        ``h``.

    Returns
    -------
    Tensor, float64 [G - 1, 4, F]
        ``[k, m]``: ``c_m`` of interval ``k``, ``W = Σ_m c_m t^m`` with ``t = d/h − k``
        (``c0 = W_k``, ``c1 = h W'_k``, ``c2 = 3 (W_{k+1} − W_k) − 2 c1 − h W'_{k+1}``,
        ``c3 = 2 (W_k − W_{k+1}) + c1 + h W'_{k+1}``): values and slopes continuous at the
        grid points.
    """
    v, m = values.detach().double(), slopes.detach().double() * spacing
    p0, p1, m0, m1 = v[:-1], v[1:], m[:-1], m[1:]
    return torch.stack([p0, m0, 3.0 * (p1 - p0) - 2.0 * m0 - m1, 2.0 * (p0 - p1) + m0 + m1], 1)


def evaluate_cubics(coefficients: torch.Tensor, spacing: float, d,
                    end: float | None = None) -> torch.Tensor:
    """``Σ_m c_m t^m`` of cubics laid out as `hermite_coefficients` (``[G − 1, 4, F]``) at
    lengths ``d`` ``[M]``, in ``d.dtype`` (autograd gives ``W'``); zero for ``d >= end``
    (default: the grid's end ``(G − 1) h``)."""
    intervals = coefficients.shape[0]
    end = intervals * spacing if end is None else end
    x = (d / spacing).clamp(max=intervals)
    k = x.detach().floor().long().clamp(0, intervals - 1)
    t = (x - k.to(d.dtype))[:, None]
    c0, c1, c2, c3 = coefficients.to(d.dtype)[k].unbind(1)
    return torch.where((d < end)[:, None], ((c3 * t + c2) * t + c1) * t + c0, 0.0)


def build_filter_table(values, slopes, spacing: float, cutoff: float) -> FilterTable:
    """Cubic Hermite table from filter values and exact derivatives at the grid points.

    Parameters
    ----------
    values : Tensor, float [G, F]
        ``W(g h)`` for ``g = 0 .. G-1`` (any float dtype; float64 recommended).
    slopes : Tensor, float [G, F]
        ``dW/dd (g h)``, same shape.
    spacing : float
        ``h`` (A).
    cutoff : float
        ``r_c``; must equal ``(G - 1) h`` (relative tolerance 1e-6).

    Returns
    -------
    FilterTable
        Coefficients computed in float64; ``c0``, ``c1`` stored in float32, ``c2`` rounded to
        float16 (after the per-feature power-of-two scaling), then ``c3`` from the rounded
        ``c2`` and the slope at the interval's right end, rounded likewise. Detached (the
        table never receives gradients).
    """
    if values.ndim != 2 or values.shape != slopes.shape or values.shape[0] < 2:
        raise ValueError(f"values and slopes must both be [G >= 2, F]; got "
                         f"{tuple(values.shape)} and {tuple(slopes.shape)}")
    G, F = values.shape
    if not math.isclose((G - 1) * spacing, cutoff, rel_tol=1e-6):
        raise ValueError(f"grid ({G} points, spacing {spacing}) does not end at cutoff {cutoff}")
    with torch.no_grad():
        exact = hermite_coefficients(values, slopes, spacing)
        m1 = slopes.detach().double()[1:] * spacing
        coeffs01 = exact[:, :2].float()
        c2, c3 = exact[:, 2], exact[:, 3]
        big = torch.maximum(c2.abs(), c3.abs()).amax(0)
        scale = torch.ldexp(torch.ones_like(big), torch.frexp(big).exponent - 15)
        q2 = (c2 / scale).half()
        # c3 that keeps the right-end slope c1 + 2 c2 + 3 c3 = m1 with the stored c1 and c2:
        # it moves by less than 2^-11 of the column's largest, far inside fp16's range
        c3 = (m1 - coeffs01[:, 1].double() - 2.0 * q2.double() * scale) / 3.0
        coeffs23 = torch.stack([q2, (c3 / scale).half()], dim=1)
    return FilterTable(coeffs01.contiguous(), coeffs23.contiguous(), scale.float(),
                       float(spacing), float(cutoff), F)


def tabulate_filter(fn, num_points: int, cutoff: float, device=None) -> FilterTable:
    """`build_filter_table` from a differentiable filter function, on ``num_points`` points.

    Parameters
    ----------
    fn : callable
        ``fn(d) -> W``: float64 distances ``[G]`` to filter values ``[G, F]``, built from
        differentiable torch operations (evaluated pointwise in ``d``).
    num_points : int
        ``G``; the spacing is ``cutoff / (G - 1)``.
    cutoff : float
        ``r_c`` (A).
    device : torch.device, optional
        Where to evaluate ``fn`` (and keep the table).

    Values and exact slopes come from one forward-mode pass (``torch.func.jvp``) in float64.
    """
    d = torch.linspace(0.0, cutoff, num_points, dtype=torch.float64, device=device)
    values, slopes = torch.func.jvp(fn, (d,), (torch.ones_like(d),))
    return build_filter_table(values, slopes, cutoff / (num_points - 1), cutoff)


def tabulate_within(fn, length: float, tolerance: float, intervals: tuple[int, int],
                    device=None, groups: list[slice] | None = None,
                    rounded: bool = True) -> tuple[FilterTable, torch.Tensor, float]:
    """The coarsest table of ``fn`` on ``[0, length]`` whose error meets ``tolerance``.

    The number of intervals doubles from ``intervals[0]`` until the largest error of the
    table against ``fn`` at every interval's midpoint, where the Hermite remainder
    ``t²(1−t)² h⁴ W⁗/24`` peaks, is at most ``tolerance`` of the largest ``|W|`` on the
    grid, or ``intervals[1]`` is reached.

    Parameters
    ----------
    fn : callable
        As for `tabulate_filter`: float64 distances ``[G]`` to values ``[G, F]``.
    length : float
        The table's end (its ``cutoff``).
    tolerance : float
        Largest error allowed, relative to the largest ``|W|`` of a column group.
    intervals : (int, int)
        The first number of intervals tried and the most tried.
    device : torch.device, optional
    groups : list of slice, optional
        Column groups whose errors are each relative to their own largest ``|W|`` (one per
        network side by side); None: all columns one group.
    rounded : bool
        Judge the stored `FilterTable` (float16 ``c2``, ``c3``: what the kernels read;
        its values jump by about 2⁻¹² of a column's largest ``c2`` at the grid points);
        False: the unrounded cubics, continuous with their slopes, for readers that take
        the float64 coefficients.

    Returns
    -------
    table : FilterTable
    coefficients : Tensor, float64 [G - 1, 4, F]
        The unrounded cubics (`hermite_coefficients`).
    error : float
        The measured midpoint error (the largest over the groups).
    """
    count, most = intervals
    groups = groups or [slice(None)]
    with torch.no_grad():
        while True:
            d = torch.linspace(0.0, length, count + 1, dtype=torch.float64, device=device)
            values, slopes = torch.func.jvp(fn, (d,), (torch.ones_like(d),))
            table = build_filter_table(values, slopes, length / count, length)
            coefficients = hermite_coefficients(values, slopes, table.spacing)
            mid = (torch.arange(count, dtype=torch.float64, device=device) + 0.5) * table.spacing
            exact = fn(mid)
            read = (evaluate_table(table, mid) if rounded
                    else evaluate_cubics(coefficients, table.spacing, mid))
            deviation = (read - exact).abs()
            error = max(float(deviation[:, g].max() / exact[:, g].abs().max().clamp_min(1e-300))
                        for g in groups)
            if error <= tolerance or count >= most:
                return table, coefficients, error
            count *= 2


@triton.jit
def _table_eval(c01_ptr, c23_ptr, scale23, d, valid, inv_h, num_intervals, cols,
                F: tl.constexpr):
    """``W(d)`` and ``W'(d)`` on the feature columns ``cols`` ([BLOCK_E, FS] each; zero where
    not ``valid``).

    ``c01_ptr``: float32 [G-1, 2, F] (c0, c1); ``c23_ptr``: float16 [G-1, 2, F] (c2, c3
    over ``scale23``); ``scale23``: float32 [1, FS] (or [BLOCK_E, FS]) registers (powers of
    two) of the columns read; ``cols``: int [1, FS] columns shared by all lanes (a feature
    slice) or [BLOCK_E, FS] per lane (`kernels.dp_descriptor`: each edge's network);
    ``d``: [BLOCK_E] distances >= 0 (arguments beyond ``(G-1) h`` read the last interval at
    ``t = 1``); ``valid``: [BLOCK_E] lanes to evaluate (in a segment and ``d < r_c``);
    ``inv_h = 1/h``; ``num_intervals = G - 1``. The
    half-precision rows are converted to FP32 and the scale applied after their Horner step
    (exact: a power of two). Table rows are loaded with the ``evict_last`` hint (they are
    reused by every edge; feature rows are not). A caller that ignores ``W'`` pays nothing
    (the compiler removes it).
    """
    x = tl.minimum(d * inv_h, num_intervals)
    k = tl.minimum(x.to(tl.int32), num_intervals - 1)  # d >= 0: truncation is floor
    t = (x - k.to(tl.float32))[:, None]
    off = (k.to(tl.int64) * 2 * F)[:, None] + cols
    m = valid[:, None]
    c3 = tl.load(c23_ptr + off + F, mask=m, other=0.0, eviction_policy="evict_last")
    c2 = tl.load(c23_ptr + off, mask=m, other=0.0, eviction_policy="evict_last")
    c3 = c3.to(tl.float32)
    c2 = c2.to(tl.float32)
    w = (c3 * t + c2) * scale23
    dw = (3.0 * c3 * t + 2.0 * c2) * scale23
    c1 = tl.load(c01_ptr + off + F, mask=m, other=0.0, eviction_policy="evict_last")
    w = w * t + c1
    dw = (dw * t + c1) * inv_h
    w = w * t + tl.load(c01_ptr + off, mask=m, other=0.0, eviction_policy="evict_last")
    return w, dw


@triton.jit
def _row_eval(w_ptr, dw_ptr, r, valid, f, F: tl.constexpr):
    """``W`` and ``W'`` on the feature columns ``f`` from the pair rows ``r`` ([BLOCK_E] int;
    `kernels.pair_filter`), in FP32 ([BLOCK_E, FS] each; zero where not ``valid``)."""
    off = r.to(tl.int64)[:, None] * F + f[None, :]
    m = valid[:, None]
    return (tl.load(w_ptr + off, mask=m, other=0.0).to(tl.float32),
            tl.load(dw_ptr + off, mask=m, other=0.0).to(tl.float32))


@triton.jit
def _edge_tile(perm_ptr, other_ptr, dist_ptr, p0, end, BLOCK_E: tl.constexpr,
               SLOTS_ARE_EDGES: tl.constexpr):
    """CSR slots ``p0 .. p0+BLOCK_E`` (mask ``< end``): edge ids, other endpoints, lengths.

    The kernels load the next tile's indices and lengths before they evaluate the current
    one (a software pipeline one tile deep), so that chain of dependent loads overlaps the
    table and feature loads instead of preceding them: -17 % forward time on the 1ENH x 64
    graph (H100). A tile past ``end`` is fully masked and loads nothing.
    ``SLOTS_ARE_EDGES``: the layout's permutation is the identity on its segments (a
    searched graph), so slot ``p`` is edge ``p`` and the permutation is not read: one link
    less in the chain, and the endpoint and length loads are contiguous.
    """
    p = p0 + tl.arange(0, BLOCK_E)
    pmask = p < end
    if SLOTS_ARE_EDGES:
        e = p.to(tl.int64)
    else:
        e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
    return (pmask, e, tl.load(other_ptr + e, mask=pmask, other=0),
            tl.load(dist_ptr + e, mask=pmask, other=0.0))


def _cfg(e, w):
    return triton.Config({"BLOCK_E": e}, num_warps=w)


# One (node, feature slice) per program. Measured on an H100 (docs/kernels.md): small
# edge tiles win (less masked work at ~66 edges per node, more programs resident).
_CONFIGS = [_cfg(4, 1), _cfg(8, 1), _cfg(8, 2), _cfg(16, 2), _cfg(16, 4)]
_INTERPRET_CONFIG = _cfg(16, 4)

#: Feature columns per program, forward and backward. Programs of one slice run together
#: (the slice is the grid's slow axis), so the table rows in flight are ``12 * FS`` bytes per
#: interval and more of them hit in L1. In the captured 1ENH x 64 step with the symmetric
#: walk (H100, three blocks, docs/kernels.md): forward slices of 16 / 32 / 64 columns
#: take 767 / 589 / 652 us at G = 2001. Backward slices of 32 / 64 / 128 columns take 674 /
#: 750 / 751 us at G = 2001 and 589 / 681 / 694 us at G = 1001 (the engine's table); the
#: whole step gains less (1,891 against 1,904 us at G = 1001, same run), since 32-column
#: slices write four partial ``g`` rows that one more kernel sums. (Launching the slices
#: one after another, each adding into one row, was slower: 733 against 625 us.)
FORWARD_SLICE = 32
BACKWARD_SLICE = 32
#: Largest size of one block's partial ``g`` rows, bytes. Above it (1ENH x 16,384: four
#: rows of 300M edges, 4.8 GB, which ran out of memory on an 80 GB GPU) the backward takes
#: all columns in one slice, writes a single row, and returns it on its own (no shared
#: `LengthGradient` buffer, which would hold every block's row at once).
PARTIAL_ROWS_BYTES = 2 << 30


def partial_rows_fit(num_features: int, num_edges: int) -> bool:
    """Whether one block's `BACKWARD_SLICE`-column partial ``g`` rows (``num_edges`` float32
    entries each) stay within `PARTIAL_ROWS_BYTES`."""
    return max(num_features // BACKWARD_SLICE, 1) * num_edges * 4 <= PARTIAL_ROWS_BYTES


def backward_slice(num_features: int, num_edges: int) -> int:
    """Feature columns per backward program: `BACKWARD_SLICE` while `partial_rows_fit`,
    else all ``num_features``."""
    return BACKWARD_SLICE if partial_rows_fit(num_features, num_edges) else num_features


@triton.jit(do_not_specialize=["num_edges"])
def _row_sum_kernel(rows_ptr, out_ptr, ptr_ptr, num_nodes, num_rows, num_edges,
                    SEARCHED: tl.constexpr, BLOCK: tl.constexpr):
    """``out[e] = sum_r rows[r, e]``, rows added in order (deterministic).

    rows_ptr: float32 [num_rows, num_edges]; out_ptr: float32 [num_edges]; ptr_ptr: int32
    destination CSR bounds [num_nodes + 1]; SEARCHED: the slots ``< ptr[num_nodes]`` are
    exactly the edges in a segment (a searched graph: every one of them was written), so
    ``out`` is 0 beyond them and the rows there are never read (they need no zero fill);
    otherwise every entry is summed (rows zero-filled where no segment writes). BLOCK:
    edges per program.
    """
    e = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inb = e < num_edges
    live = inb
    if SEARCHED:
        live = inb & (e < tl.load(ptr_ptr + num_nodes).to(tl.int64))
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(num_rows):
        acc += tl.load(rows_ptr + r * num_edges + e, mask=live, other=0.0)
    tl.store(out_ptr + e, acc, mask=inb)


class LengthGradient:
    """The length gradients of the blocks that share one ``dist`` (one step), summed once.

    Without it every block's backward would zero-fill its partial ``g`` rows, sum them into
    ``dE_b/dd`` [E], and autograd would add the blocks' vectors: ``3 B`` kernels for ``B``
    blocks. Here every block writes its rows into one buffer ``[B * F/FS, E]``; the block
    that ran first in the forward, whose backward runs last (every later block depends on
    its output), sums all rows in one kernel and returns ``dE/dd``; the others return no
    gradient for ``dist``. Create one per forward pass and pass it to every block's
    `tabulated_cfconv` (with ``slots_are_edges`` the same for all). On graphs too large for
    `partial_rows_fit` it is not used: each block then returns its own single row.

    Parameters
    ----------
    num_blocks : int
        ``B``, the calls that will share it.
    """

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.registered = 0
        self.rows = None  # float32 [B, F/FS, E], allocated by the first backward
        self.written: set[int] = set()

    def register(self) -> int:
        """The next block's index (forward order)."""
        if self.registered == self.num_blocks:
            raise RuntimeError(f"LengthGradient for {self.num_blocks} blocks got one more")
        self.registered += 1
        return self.registered - 1

    def block_rows(self, block, num_rows, num_edges, device, zeroed) -> torch.Tensor:
        """Block ``block``'s ``[num_rows, num_edges]`` rows of the shared buffer."""
        shape = (self.num_blocks, num_rows, num_edges)
        if self.rows is None or tuple(self.rows.shape) != shape:
            make = torch.zeros if zeroed else torch.empty
            self.rows = make(shape, dtype=torch.float32, device=device)
        self.written.add(block)
        return self.rows[block]

    def total(self, csr: GraphCSR, searched: bool) -> torch.Tensor:
        """``dE/dd`` [E]: the sum of every row written since the last total (float32)."""
        if self.written != set(range(self.registered)):
            raise RuntimeError(f"length gradients of blocks {sorted(self.written)} of "
                               f"{self.registered} were written; the first block's backward "
                               f"must run last")
        rows = self.rows.reshape(-1, self.rows.shape[-1])
        out = torch.empty(rows.shape[1], dtype=torch.float32, device=rows.device)
        block = 1024
        _row_sum_kernel[(triton.cdiv(rows.shape[1], block),)](
            rows, out, csr.dst_ptr, csr.num_nodes, rows.shape[0], rows.shape[1],
            SEARCHED=searched, BLOCK=block, num_warps=4)
        self.written = set()
        return out


@autotune(pick_configs(_CONFIGS, _INTERPRET_CONFIG), ["num_nodes", "F", "ROWS"])
@triton.jit
def _tab_fwd_kernel(dist_ptr, xs_ptr, src_ptr, ptr_ptr, perm_ptr, c01_ptr, c23_ptr,
                    scale_ptr, out_ptr, num_nodes, num_intervals, inv_h, cutoff,
                    F: tl.constexpr, FS: tl.constexpr, BLOCK_E: tl.constexpr,
                    SLOTS_ARE_EDGES: tl.constexpr, ROWS: tl.constexpr):
    """``out[i, f] = sum_{e in dst segment i} xs[src_e, f] * W_f(d_e)`` for one node ``i``
    (grid axis 0) and one slice of ``FS`` feature columns ``f`` (axis 1).

    dist_ptr: float32 [E] edge lengths (`kernels.edge_distances`); xs_ptr:
    float32/float16/bfloat16 [P', F]; src_ptr: int64 [E]; ptr_ptr, perm_ptr: int32
    destination CSR (``dst_ptr [N+1]``, ``dst_perm [E]``); c01_ptr, c23_ptr, scale_ptr: the
    table (`FilterTable` coeffs01 float32 [G-1, 2, F], coeffs23 float16 [G-1, 2, F], scale23
    float32 [F]); out_ptr: float32 [N, F]; num_nodes: N (autotune key); num_intervals: G-1;
    inv_h: 1/h; cutoff: r_c; F: feature width (power of two); FS: columns per program (a
    power of two dividing F); BLOCK_E: edges per tile; SLOTS_ARE_EDGES: ``perm_ptr`` is the
    identity on the segments and is not read (`_edge_tile`); ROWS: the filter comes from
    pair rows (`kernels.pair_filter`): ``dist_ptr`` is then the int32 row of each edge,
    ``c01_ptr`` the rows ``W [C, F]`` and ``c23_ptr`` the rows ``W' [C, F]`` (float32 or
    float16), and the table arguments are unused. Messages accumulate per tile lane in FP32
    registers and are summed over the lanes once, at the end.
    """
    node = tl.program_id(0).to(tl.int64)
    f = tl.program_id(1) * FS + tl.arange(0, FS)
    end = tl.load(ptr_ptr + node + 1)
    if not ROWS:
        scale23 = tl.load(scale_ptr + f)[None, :]
    acc = tl.zeros([BLOCK_E, FS], dtype=tl.float32)
    start = tl.load(ptr_ptr + node)
    # (no "_" here: Triton would carry it through the loop with the type of its next use)
    pmask, _first_ids, j, d = _edge_tile(perm_ptr, src_ptr, dist_ptr, start, end, BLOCK_E,
                                         SLOTS_ARE_EDGES)
    for p0 in range(start, end, BLOCK_E):
        pmask_n, _next_ids, j_n, d_n = _edge_tile(perm_ptr, src_ptr, dist_ptr, p0 + BLOCK_E,
                                                  end, BLOCK_E, SLOTS_ARE_EDGES)
        if ROWS:
            valid = pmask
            w, _ = _row_eval(c01_ptr, c23_ptr, d, valid, f, F)
        else:
            valid = pmask & (d < cutoff)
            w, _ = _table_eval(c01_ptr, c23_ptr, scale23, d, valid, inv_h, num_intervals,
                               f[None, :], F)
        x = tl.load(xs_ptr + j.to(tl.int64)[:, None] * F + f[None, :], mask=valid[:, None],
                    other=0.0)
        acc += x.to(tl.float32) * w
        pmask, j, d = pmask_n, j_n, d_n
    tl.store(out_ptr + node * F + f, tl.sum(acc, axis=0))


@autotune(pick_configs(_CONFIGS, _INTERPRET_CONFIG), ["num_nodes", "F", "ROWS", "XS_GRAD"])
@triton.jit(do_not_specialize=["num_edges"])
def _tab_bwd_kernel(dist_ptr, xs_ptr, gu_ptr, other_ptr, ptr_ptr, perm_ptr, c01_ptr,
                    c23_ptr, scale_ptr, gxs_ptr, g_ptr, num_nodes, num_edges, num_intervals,
                    inv_h, cutoff, F: tl.constexpr, FS: tl.constexpr, BLOCK_E: tl.constexpr,
                    SLOTS_ARE_EDGES: tl.constexpr, ROWS: tl.constexpr,
                    XS_GRAD: tl.constexpr):
    """``grad_xs[j, f]`` (with ``XS_GRAD``) and the slice's part of ``g_e = dE/dd_e`` for the
    edges out of ``j`` (grid axis 0), on one slice of ``FS`` feature columns ``f`` (axis 1).

    dist_ptr: float32 [E]; xs_ptr: float32/float16/bfloat16 [P', F]; gu_ptr: float32 grad_u
    [N, F]; other_ptr, ptr_ptr, perm_ptr: either ``dst`` (int64 [E]) with the source CSR
    (``src_ptr``, ``src_perm``, int32), or, for a symmetric graph, ``src`` with the
    destination CSR: node ``j``'s edges ``i -> j`` stand for their reverses ``j -> i``
    (same length, other endpoint ``i``), and the slice's part of the reverse's gradient is
    written at the edge visited; c01_ptr, c23_ptr, scale_ptr: the table, as in
    `_tab_fwd_kernel`; gxs_ptr: grad_xs [P', F] in xs's dtype (rows < N written; not read
    without ``XS_GRAD``, when ``xs`` needs no gradient: a first block's ``lin1`` of the
    bead types); g_ptr:
    float32 [F // FS, E], row ``s`` the sum over slice ``s``'s columns (edges in a segment
    written, 0 for d >= r_c); num_edges: E (the row stride of g); num_nodes, num_intervals,
    inv_h, cutoff, F, FS, BLOCK_E, SLOTS_ARE_EDGES, ROWS: as in `_tab_fwd_kernel`.
    """
    node = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    f = part * FS + tl.arange(0, FS)
    end = tl.load(ptr_ptr + node + 1)
    x = tl.load(xs_ptr + node * F + f).to(tl.float32)[None, :]
    if not ROWS:
        scale23 = tl.load(scale_ptr + f)[None, :]
    g_row = g_ptr + part.to(tl.int64) * num_edges
    acc = tl.zeros([BLOCK_E, FS], dtype=tl.float32)
    start = tl.load(ptr_ptr + node)
    pmask, e, i, d = _edge_tile(perm_ptr, other_ptr, dist_ptr, start, end, BLOCK_E,
                                SLOTS_ARE_EDGES)
    for p0 in range(start, end, BLOCK_E):
        pmask_n, e_n, i_n, d_n = _edge_tile(perm_ptr, other_ptr, dist_ptr, p0 + BLOCK_E, end,
                                            BLOCK_E, SLOTS_ARE_EDGES)
        if ROWS:
            valid = pmask
            w, dw = _row_eval(c01_ptr, c23_ptr, d, valid, f, F)
        else:
            valid = pmask & (d < cutoff)
            w, dw = _table_eval(c01_ptr, c23_ptr, scale23, d, valid, inv_h, num_intervals,
                                f[None, :], F)
        gu = tl.load(gu_ptr + i.to(tl.int64)[:, None] * F + f[None, :], mask=valid[:, None],
                     other=0.0)
        tl.store(g_row + e, tl.sum(gu * x * dw, axis=1), mask=pmask)
        if XS_GRAD:
            acc += gu * w
        pmask, e, i, d = pmask_n, e_n, i_n, d_n
    if XS_GRAD:
        tl.store(gxs_ptr + node * F + f, tl.sum(acc, axis=0).to(gxs_ptr.dtype.element_ty))


def _check(dist, xs, table: FilterTable | PairFilterRows):
    width = xs.shape[1]
    torch_to_tl_dtype(xs.dtype)  # float32, float16 or bfloat16
    if dist.dtype != torch.float32 or dist.ndim != 1:
        raise ValueError(f"tabulated_cfconv needs float32 edge lengths [E] (edge_distances); "
                         f"got {dist.dtype} {tuple(dist.shape)}")
    if width != table.num_features or width < 16 or width & (width - 1):
        raise ValueError(f"tabulated_cfconv needs F a power of two >= 16 matching the table; "
                         f"got xs width {width}, table width {table.num_features}")
    if isinstance(table, PairFilterRows):
        rows = (table.w, table.dw)
        if (any(not t.is_contiguous() or t.shape != table.w.shape for t in rows)
                or table.w.dtype not in (torch.float32, torch.float16)
                or table.dw.dtype != table.w.dtype
                or table.row.dtype != torch.int32 or table.row.shape != dist.shape):
            raise ValueError("pair filter rows must be contiguous float32 or float16 [C, F] "
                             "with an int32 row per edge (build them with pair_filter_rows)")
        check_no_grad("tabulated_cfconv", w=table.w, dw=table.dw)
        return
    for name, dtype in (("coeffs01", torch.float32), ("coeffs23", torch.float16),
                        ("scale23", torch.float32)):
        t = getattr(table, name)
        if t.dtype != dtype or not t.is_contiguous() or t.shape[-1] != width:
            raise ValueError(f"table {name} must be contiguous {dtype} with {width} features "
                             f"(build it with build_filter_table)")
    check_no_grad("tabulated_cfconv", coeffs01=table.coeffs01, coeffs23=table.coeffs23,
                  scale23=table.scale23)


def _launch(kernel, config, num_nodes, args):
    """Launch ``kernel`` on (node, feature slice) programs; ``config`` (a triton.Config)
    bypasses the autotuner (tests)."""
    if not num_nodes:
        return None
    grid = (num_nodes, args["F"] // args["FS"])
    if config is None:
        return kernel[grid](num_nodes=num_nodes, **args)
    return kernel.fn[grid](num_nodes=num_nodes, num_warps=config.num_warps,
                           num_stages=config.num_stages, **config.kwargs, **args)


def _table_args(dist, table: FilterTable | PairFilterRows, feature_slice: int) -> dict:
    """The kernels' filter arguments: a table read at ``dist``, or pair rows (``ROWS``)."""
    F = table.num_features
    FS = min(feature_slice, F)
    if isinstance(table, PairFilterRows):
        return dict(dist_ptr=table.row, c01_ptr=table.w, c23_ptr=table.dw, scale_ptr=table.w,
                    num_intervals=0, inv_h=0.0, cutoff=0.0, F=F, FS=FS, ROWS=True)
    return dict(dist_ptr=dist, c01_ptr=table.coeffs01, c23_ptr=table.coeffs23,
                scale_ptr=table.scale23, num_intervals=table.num_intervals,
                inv_h=1.0 / table.spacing, cutoff=table.cutoff, F=F, FS=FS, ROWS=False)


class _TabulatedCFConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dist, xs, src, dst, csr, table, configs, symmetric, slots_are_edges,
                shared):
        dist, xs = dist.contiguous(), xs.contiguous()
        _check(dist, xs, table)
        n = csr.num_nodes
        out = torch.empty(n, xs.shape[1], dtype=torch.float32, device=xs.device)
        _launch(_tab_fwd_kernel, configs[0], n,
                dict(xs_ptr=xs, src_ptr=src, ptr_ptr=csr.dst_ptr, perm_ptr=csr.dst_perm,
                     out_ptr=out, SLOTS_ARE_EDGES=slots_are_edges,
                     **_table_args(dist, table, FORWARD_SLICE)))
        ctx.save_for_backward(dist, xs, src, dst, *csr)
        ctx.table, ctx.configs = table, configs
        ctx.symmetric, ctx.slots_are_edges = symmetric, slots_are_edges
        ctx.shared = shared
        ctx.block = None if shared is None else shared.register()
        return out

    @staticmethod
    def backward(ctx, grad_u):
        dist, xs, src, dst, *csr = ctx.saved_tensors
        csr = GraphCSR(*csr)
        if ctx.symmetric:  # the edges into each node, standing for those out of it
            walk = dict(other_ptr=src, ptr_ptr=csr.dst_ptr, perm_ptr=csr.dst_perm,
                        SLOTS_ARE_EDGES=ctx.slots_are_edges)
        else:
            walk = dict(other_ptr=dst, ptr_ptr=csr.src_ptr, perm_ptr=csr.src_perm,
                        SLOTS_ARE_EDGES=False)
        F, num_edges = ctx.table.num_features, dist.numel()
        args = _table_args(dist, ctx.table, backward_slice(F, num_edges))
        shared = ctx.shared if partial_rows_fit(F, num_edges) else None
        grad_xs = None
        if ctx.needs_input_grad[1]:
            grad_xs = torch.empty_like(xs)  # the kernel writes rows < N; zero the rest
            grad_xs[csr.num_nodes:].zero_()
        # one row per feature slice; padding edges are in no segment and stay 0 (or, on a
        # searched graph, are not summed)
        num_rows = args["F"] // args["FS"]
        if shared is None:
            g = torch.zeros(num_rows, num_edges, dtype=torch.float32, device=xs.device)
        else:
            g = shared.block_rows(ctx.block, num_rows, num_edges, xs.device,
                                  zeroed=not ctx.slots_are_edges)
        _launch(_tab_bwd_kernel, ctx.configs[1], csr.num_nodes,
                dict(xs_ptr=xs, gu_ptr=grad_u.contiguous().float(),
                     gxs_ptr=xs if grad_xs is None else grad_xs, g_ptr=g,
                     num_edges=num_edges, XS_GRAD=grad_xs is not None, **walk, **args))
        if shared is not None:
            grad_dist = shared.total(csr, ctx.slots_are_edges) if ctx.block == 0 else None
        else:
            grad_dist = g[0] if num_rows == 1 else g.sum(0)
        return grad_dist, grad_xs, None, None, None, None, None, None, None, None


def tabulated_cfconv(dist, xs, src, dst, csr: GraphCSR, table: FilterTable | PairFilterRows, *,
                     symmetric: bool = False, slots_are_edges: bool = False,
                     length_grad: LengthGradient | None = None):
    """Continuous-filter convolution with a tabulated filter, fused forward and backward.

    Parameters
    ----------
    dist : Tensor, float32 [E]
        Edge lengths, `kernels.edge_distances` of the positions (entries of padding edges
        are never read). May require grad: the backward returns ``dE/dd_e`` (0 for padding
        edges and for ``d >= r_c``), which ``edge_distances`` turns into position gradients
        once for all blocks that share the lengths.
    xs : Tensor, float32, float16 or bfloat16 [P', F]
        ``lin1(h)``, ``P' >= csr.num_nodes``; F a power of two >= 16 equal to the table's.
        16-bit storage halves the gather bytes; arithmetic is FP32. May require grad (the
        gradient comes back in ``xs.dtype``).
    src, dst : Tensor, int64 [E]
        Edge endpoints (message ``src -> dst``).
    csr : GraphCSR
        Both CSR layouts of these edges (`kernels.csr.build_csr`); padding edges are in no
        segment and contribute nothing.
    table : FilterTable or PairFilterRows
        The block's filter: a table (`build_filter_table`; edges with ``d >= table.cutoff``
        add 0), or its exact values and derivatives per pair (`kernels.pair_filter`; the
        rows are read instead of interpolated, ``dist`` only receives the gradient, and the
        graph must be symmetric).
    symmetric : bool
        The caller guarantees that the valid edges are closed under reversal and that
        ``dist`` is the same number for both directions of a pair (every graph the engine
        builds, with lengths from `kernels.edge_distances`). The backward then walks the
        destination layout for the source layout's work as well: the edges into ``j``,
        reversed, are the edges out of ``j``. Each pair's two entries of the length
        gradient come back swapped, which gives the same position gradients (the two
        lengths are one function of the positions). Not checked (that would synchronise
        with the host); a graph that is not symmetric gives wrong gradients.
    slots_are_edges : bool
        The caller guarantees that ``csr.dst_perm`` is the identity on the segments (a
        searched graph, `kernels.pair_search_csr`): the kernels skip reading it.
    length_grad : LengthGradient, optional
        Shared by every block that reads this ``dist``: the blocks' length gradients are
        collected in one buffer and summed once, by the backward of the block that called
        first (see `LengthGradient`); the other blocks return no gradient for ``dist``.

    Returns
    -------
    Tensor, float32 [csr.num_nodes, F]
        ``u_i = sum_{e: dst_e = i} xs[src_e] * W(d_e)``. Gradients flow to ``dist`` (the
        exact derivative of the interpolated filter) and ``xs``; the table gets none.
        Deterministic (no atomics).
    """
    return _TabulatedCFConv.apply(dist, xs, src, dst, csr, table, (None, None),
                                  bool(symmetric), bool(slots_are_edges), length_grad)


def evaluate_table(table: FilterTable, d):
    """The interpolant ``W(d)`` in PyTorch (autograd gives ``W'``; any float dtype).

    Parameters
    ----------
    table : FilterTable
    d : Tensor, float [M]
        Distances ``>= 0``; the stored coefficients (``c2``, ``c3`` rescaled exactly from
        float16, as in the kernels) are evaluated in ``d.dtype``.

    Returns
    -------
    Tensor, [M, F] in ``d.dtype``; zero for ``d >= table.cutoff``.
    """
    stored = torch.cat([table.coeffs01.to(d.dtype),
                        table.coeffs23.to(d.dtype) * table.scale23.to(d.dtype)], 1)
    return evaluate_cubics(stored, table.spacing, d, end=table.cutoff)


def tabulated_cfconv_reference(dist, xs, src, dst, csr: GraphCSR,
                               table: FilterTable | PairFilterRows, *,
                               symmetric: bool = False, slots_are_edges: bool = False,
                               length_grad: LengthGradient | None = None):
    """PyTorch reference of `tabulated_cfconv` (autograd; materialises E x F).

    Computes in ``dist.dtype`` (float64 lengths, e.g. `edge_distances_reference` of float64
    positions, give a float64 evaluation of the same stored table, for finite-difference
    checks) with `evaluate_table`. ``symmetric`` and ``slots_are_edges`` describe how the
    kernels may walk the graph, and ``length_grad`` how they collect the length gradients;
    the reference's result does not depend on them (its length gradient is the unswapped
    one, returned by every call).
    """
    valid = valid_edge_mask(csr)
    n = csr.num_nodes
    d = torch.where(valid, dist, 0.0)
    if isinstance(table, PairFilterRows):  # value W, derivative W' (first-order in d)
        r = table.row.long()
        w = table.w.to(d.dtype)[r] + (d - d.detach())[:, None] * table.dw.to(d.dtype)[r]
    else:
        w = evaluate_table(table, d)
    msg = torch.where(valid[:, None], xs.to(dist.dtype)[torch.where(valid, src, 0)] * w, 0.0)
    out = torch.zeros(n + 1, xs.shape[1], dtype=dist.dtype, device=xs.device)
    return out.index_add(0, torch.where(valid, dst, n), msg)[:n]
