"""Flash message passing: the whole continuous-filter convolution of one block in one kernel.

For one interaction block and every edge ``e = (src j -> dst i)``::

    d_e = |r_i - r_j|,  e(d) = basis (K),  C(d) = envelope          (kernels.radial_basis)
    W_e = (A2 tanh(A1 e(d_e) + a1) + b2) * C(d_e)                   [F]   filter MLP
    u_i = sum_{e: dst_e = i} xs[j] * W_e                             [N, F]

Forward (`_conv_kernel`): one program owns one destination node, i.e. one segment of the
destination-grouped CSR (or, with ``PERSISTENT``, every ``num_programs``-th node, the filter
weights loaded once per program), and streams its edges in tiles of ``BLOCK_E``. Per tile,
on chip only: gather positions, distance, envelope, basis ``[BLOCK_E, KP]``, the two filter
GEMMs on tensor cores (``tl.dot``: one TF32 product of operands rounded to TF32, or 16-bit
operands with the calibrated per-channel scales; FP32 accumulation in every case), ``tanh``,
envelope, and the product with the gathered ``xs[src]`` rows, added into a ``[BLOCK_E, F]``
FP32 register accumulator that is summed over its rows once at the end and written once:
exclusive ownership, no atomics, deterministic, FP32 sums. Nothing of size E x K or E x F is
ever written. Edge tiles stay small (16 or 32 rows): the accumulators of the two GEMMs and
the gathered rows then fit in registers; larger tiles and one-hot tensor-core reductions
over several nodes per program spilled registers and were slower (docs/kernels.md).

Backward, given ``grad_u [N, F]``, two kernels and the position-gradient pass:

* ``grad_xs[j] = sum_{e: src_e = j} grad_u[dst_e] * W_e`` is the same convolution with
  ``grad_u`` as features over the source-grouped CSR, or, on a symmetric graph, over the
  destination layout (the edges into ``j`` stand for those out of it; ``W`` is the same). The
  same pass writes, per edge, the envelope-derivative part of ``g_e = dE/dd_e``:
  ``C'(d_e) <grad_u[dst_e] * Wpre_e, xs[src_e]>`` (``EDGE_DOT``; ``Wpre`` is the filter before
  its envelope).
* `_length_grad_kernel` adds the filter network's part,
  ``C(d) <A2^T s_e, tanh'(z) * (A1 e'(d))>`` with ``s_e = grad_u[dst_e] * xs[src_e]`` (``e'``
  includes the derivative of an envelope inside the basis), in chunks of hidden units. On a
  symmetric graph it runs once per unordered pair (`upper_edges`), with ``s`` summed over
  both directions: one filter derivative per pair.

Then `kernels.segment_reduce.edge_grad_to_positions` sums ``g_e (r_i - r_j)/d`` over both
CSRs into position gradients (no atomics). Weights and basis parameters get no gradient.

Padding: edges outside every CSR segment (``src``/``dst`` outside ``[0, num_nodes)`` or
beyond ``num_edges``, see `kernels.csr`) are never visited, so they contribute nothing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from kernels._triton import (
    INTERPRET,
    autotune,
    check_no_grad,
    mma,
    pick_configs,
    tanh_f32,
    tf32_round,
    tl,
    torch_to_tl_dtype,
    triton,
)
from kernels.csr import GraphCSR, valid_edge_mask
from kernels.quantize import DTYPES, PackedLinear, pack_linear
from kernels.radial_basis import (
    RadialSpec,
    edge_envelope,
    edge_vector,
    radial_features,
    radial_reference_terms,
    reference_distances,
)
from kernels.segment_reduce import edge_grad_to_positions

__all__ = ["FilterParams", "pack_filter", "cfconv", "cfconv_reference", "upper_edges",
           "PRECISIONS"]

#: FP32 product modes of the filter GEMMs: one TF32 product of rounded operands (the
#: default; force error against FP64 measured in the tests and docs/kernels.md), three TF32
#: products (``tf32x3``, about FP32's accuracy), or CUDA-core FMA (``ieee``, tests).
PRECISIONS = ("tf32", "tf32x3", "ieee")


@dataclass(frozen=True)
class FilterParams:
    """The filter network of one block, packed (`kernels.quantize.pack_linear`).

    Attributes
    ----------
    lin1 : PackedLinear
        ``A1 [F, K]``, ``a1 [F]`` (K padded to ``KP``, a power of two >= 16).
    lin2 : PackedLinear
        ``A2 [F, F]``, optional ``b2 [F]`` (zeros when absent).
    lin2_rows : Tensor [F, F]
        ``lin2.weight_t`` transposed and contiguous (the packed ``A2`` by rows): the
        backward pass multiplies by ``A2^T`` and reads it row by row, as tensor cores want
        their second operand.
    """

    lin1: PackedLinear
    lin2: PackedLinear
    lin2_rows: torch.Tensor

    @property
    def dtype(self) -> torch.dtype:
        return self.lin1.dtype


def pack_filter(A1, a1, A2, b2=None, dtype=torch.float32, spec: RadialSpec | None = None,
                calib_dist=None) -> FilterParams:
    """Pack a filter network ``W = A2 tanh(A1 e + a1) + b2`` for `cfconv`.

    Parameters
    ----------
    A1 : Tensor [F, K]; a1 : Tensor [F]; A2 : Tensor [F, F]; b2 : Tensor [F], optional
        Weights (detached: the fused op returns no weight gradients).
    dtype : torch.dtype or {"fp32", "fp16", "bf16"}
        Operand type of the two GEMMs (FP32 accumulation in every case).
    spec : RadialSpec, optional
        Needed for 16-bit packing: calibration inputs are the basis at ``calib_dist``
        (layer 1) and the hidden activations they produce (layer 2).
    calib_dist : Tensor, float [M], optional
        Calibration distances; default 2048 points evenly over ``[0, cutoff_upper]``.
    """
    dtype = DTYPES.get(dtype, dtype)
    F = A1.shape[0]
    if F < 16 or F & (F - 1) or A2.shape != (F, F):
        raise ValueError(f"cfconv needs F a power of two >= 16 and A2 [F, F]; got A1 "
                         f"{tuple(A1.shape)}, A2 {tuple(A2.shape)}")
    calib1 = calib2 = None
    if dtype != torch.float32:
        if spec is None:
            raise ValueError("16-bit filter packing needs the RadialSpec for calibration")
        if calib_dist is None:
            calib_dist = torch.linspace(0.0, spec.cutoff_upper, 2048, device=A1.device)
        with torch.no_grad():
            calib1, _ = radial_reference_terms(calib_dist.float(), spec)
            calib2 = torch.tanh(calib1 @ A1.detach().float().t() + a1.detach().float())
    lin2 = pack_linear(A2, b2, dtype, calib2)
    return FilterParams(pack_linear(A1, a1, dtype, calib1), lin2,
                        lin2.weight_t.t().contiguous())


@triton.jit
def _load_weight(ptr, rows, cols, row_stride, col_stride, DT: tl.constexpr,
                 PREC: tl.constexpr):
    """The tile ``[rows, cols]`` of a packed weight (element ``(r, c)`` at ``ptr + r *
    row_stride + c * col_stride``), rounded to TF32 for single-pass TF32 products."""
    w = tl.load(ptr + rows[:, None] * row_stride + cols[None, :] * col_stride)
    if DT == tl.float32 and PREC == "tf32":  # noqa: SIM300
        w = tf32_round(w)
    return w


@triton.jit
def _hidden(basis, w1, s1, b1, DT: tl.constexpr, PREC: tl.constexpr):
    """Hidden layer ``t = tanh(e A1^T + a1)`` [BLOCK_E, len(s1)] of the filter network."""
    return tanh_f32(mma(basis, w1, DT, PREC) * s1[None, :] + b1[None, :])


def _cfg(e, w, **kw):
    return triton.Config({"BLOCK_E": e, **kw}, num_warps=w, num_stages=1)


def _prune_configs(configs, named_args, **kwargs):
    """IEEE FP32 products (CUDA-core FMA, a test and reference mode) get one config; hidden
    chunks must divide F."""
    F = kwargs.get("F", named_args.get("F"))
    fits = [c for c in configs if F % c.kwargs.get("FC", 1) == 0]
    if not fits:  # F below every chunk: one chunk of F
        c = configs[0]
        fits = [triton.Config({**c.kwargs, "FC": F}, num_warps=c.num_warps, num_stages=1)]
    return fits[:1] if kwargs.get("PREC", named_args.get("PREC")) == "ieee" else fits


# One node per program, or a persistent grid (a few programs per SM walking the nodes with
# the filter weights loaded once); small edge tiles keep the filter GEMMs' accumulators in
# registers (larger tiles spill; docs/kernels.md).
_CONV_CONFIGS = pick_configs(
    [_cfg(16, 4, PERSISTENT=0), _cfg(32, 8, PERSISTENT=0), _cfg(16, 4, PERSISTENT=2),
     _cfg(16, 4, PERSISTENT=3), _cfg(32, 8, PERSISTENT=2), _cfg(32, 4, PERSISTENT=0)],
    _cfg(16, 4, PERSISTENT=0),
)
# Hidden units in chunks of FC (FC = F: no chunking)
_GRAD_CONFIGS = pick_configs(
    [_cfg(16, 4, FC=32), _cfg(16, 4, FC=64), _cfg(16, 4, FC=128), _cfg(32, 8, FC=64),
     _cfg(32, 8, FC=128), _cfg(64, 8, FC=128)],
    _cfg(16, 4, FC=16),
)


@autotune(_CONV_CONFIGS, ["num_nodes", "F", "KP", "PREC", "EDGE_DOT"],
          prune_configs_by={"early_config_prune": _prune_configs})
@triton.jit
def _conv_kernel(pos_ptr, feat_ptr, other_ptr, ptr_ptr, perm_ptr, own_ptr, edge_out_ptr,
                 w1_ptr, s1_ptr, b1_ptr, w2_ptr, s2_ptr, b2_ptr, out_ptr, num_nodes, mu_ptr,
                 gamma_ptr, K, alpha, basis_lower, env_a, env_b, env_upper, env_lower,
                 EXP_NORMAL: tl.constexpr, ENV_LOWER: tl.constexpr,
                 ENV_IN_BASIS: tl.constexpr, ENV_ON_FILTER: tl.constexpr,
                 EDGE_DOT: tl.constexpr, F: tl.constexpr, KP: tl.constexpr,
                 DT: tl.constexpr, PREC: tl.constexpr, BLOCK_E: tl.constexpr,
                 PERSISTENT: tl.constexpr):
    """``out[n] = sum_{p in segment n} feat[other[perm[p]]] * W(d)`` for the nodes ``n`` of
    this program: its id, or, with ``PERSISTENT`` programs per SM (the grid's size, see
    `_conv`), every ``num_programs``-th node from it.

    With ``EDGE_DOT`` each edge also gets ``edge_out[e] = C'(d) <feat[other] * Wpre,
    own[n]>`` (``Wpre``: the filter before its envelope), the envelope-derivative part of
    ``dE/dd_e`` in the backward pass.
    """
    f = tl.arange(0, F)
    w1 = _load_weight(w1_ptr, tl.arange(0, KP), f, F, 1, DT, PREC)
    w2 = _load_weight(w2_ptr, f, f, F, 1, DT, PREC)
    s1 = tl.load(s1_ptr + f)
    b1 = tl.load(b1_ptr + f)
    s2 = tl.load(s2_ptr + f)
    b2 = tl.load(b2_ptr + f)
    step = tl.num_programs(0) if PERSISTENT else num_nodes
    for node in range(tl.program_id(0), num_nodes, step):
        start = tl.load(ptr_ptr + node)
        end = tl.load(ptr_ptr + node + 1)
        row = (tl.zeros([], tl.int64) + node) * F
        owner = tl.full([BLOCK_E], node, tl.int64)
        if EDGE_DOT:
            y = tl.load(own_ptr + row + f)
        acc = tl.zeros([BLOCK_E, F], dtype=tl.float32)
        for p0 in range(start, end, BLOCK_E):
            p = p0 + tl.arange(0, BLOCK_E)
            pmask = p < end
            e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
            j = tl.load(other_ptr + e, mask=pmask, other=0).to(tl.int64)
            x = tl.load(feat_ptr + j[:, None] * F + f[None, :], mask=pmask[:, None], other=0.0)
            _, _, _, d = edge_vector(pos_ptr, owner, j, pmask)
            c, dc = edge_envelope(d, env_a, env_b, env_upper, env_lower, ENV_LOWER,
                                  ENV_IN_BASIS, ENV_ON_FILTER)
            basis, _ = radial_features(d, c, dc, mu_ptr, gamma_ptr, K, alpha, basis_lower, KP,
                                       EXP_NORMAL, ENV_IN_BASIS)
            t = _hidden(basis, w1, s1, b1, DT, PREC)
            m = x * (mma(t, w2, DT, PREC) * s2[None, :] + b2[None, :])
            if EDGE_DOT:
                tl.store(edge_out_ptr + e, tl.sum(m * y[None, :], axis=1) * dc, mask=pmask)
            if ENV_ON_FILTER:
                m = m * c[:, None]
            acc += m
        tl.store(out_ptr + row + f, tl.sum(acc, axis=0))


@autotune(_GRAD_CONFIGS, ["F", "KP", "PREC", "PAIRS"],
          prune_configs_by={"early_config_prune": _prune_configs}, restore_value=["g_ptr"])
@triton.jit(do_not_specialize=["E"])
def _length_grad_kernel(pos_ptr, xs_ptr, gu_ptr, src_ptr, dst_ptr, order_ptr, count_ptr,
                        w1_ptr, s1_ptr, b1_ptr, w2t_ptr, s2_ptr, g_ptr, E, mu_ptr, gamma_ptr, K,
                        alpha, basis_lower, env_a, env_b, env_upper, env_lower,
                        EXP_NORMAL: tl.constexpr, ENV_LOWER: tl.constexpr,
                        ENV_IN_BASIS: tl.constexpr, ENV_ON_FILTER: tl.constexpr,
                        PAIRS: tl.constexpr, F: tl.constexpr, KP: tl.constexpr,
                        DT: tl.constexpr, PREC: tl.constexpr, BLOCK_E: tl.constexpr,
                        FC: tl.constexpr):
    """``g[e] += C(d) <s_e, dWpre/dd>`` for the edges ``order[0 : count]``, tile by tile.

    ``s_e = gu[dst] * xs[src]``; with ``PAIRS`` the listed edges stand for their pairs and
    ``s_e`` also holds the reverse direction, ``+ gu[src] * xs[dst]``. ``E`` is the length of
    ``order`` (the grid); it is no autotuning key, so that a neighbour list whose capacity
    changes does not re-tune (seconds) at a rebuild in the middle of a run. The autotuner
    restores ``g`` after each timing run (the kernel adds into it).
    """
    f = tl.arange(0, F)
    s2 = tl.load(s2_ptr + f)
    q0 = tl.program_id(0) * BLOCK_E
    count = tl.load(count_ptr)
    for first in range(q0, tl.minimum(count, q0 + BLOCK_E), BLOCK_E):  # one tile, or none
        q = first + tl.arange(0, BLOCK_E)
        mask = q < count
        e = tl.load(order_ptr + q, mask=mask, other=0).to(tl.int64)
        i = tl.load(dst_ptr + e, mask=mask, other=0).to(tl.int64)
        j = tl.load(src_ptr + e, mask=mask, other=0).to(tl.int64)
        _, _, _, d = edge_vector(pos_ptr, i, j, mask)
        c, dc = edge_envelope(d, env_a, env_b, env_upper, env_lower, ENV_LOWER, ENV_IN_BASIS,
                              ENV_ON_FILTER)
        basis, dbasis = radial_features(d, c, dc, mu_ptr, gamma_ptr, K, alpha, basis_lower,
                                        KP, EXP_NORMAL, ENV_IN_BASIS)
        rows = mask[:, None]
        s = (tl.load(gu_ptr + i[:, None] * F + f[None, :], mask=rows, other=0.0)
             * tl.load(xs_ptr + j[:, None] * F + f[None, :], mask=rows, other=0.0))
        if PAIRS:
            s += (tl.load(gu_ptr + j[:, None] * F + f[None, :], mask=rows, other=0.0)
                  * tl.load(xs_ptr + i[:, None] * F + f[None, :], mask=rows, other=0.0))
        sq = s * s2[None, :]
        if DT != tl.float32:  # noqa: SIM300 - 16-bit: keep rows in the best-resolved range
            rmax = tl.max(tl.abs(sq), axis=1)
            rmax = tl.where(rmax > 0, rmax, 1.0)
            sq = sq / rmax[:, None]
        else:
            rmax = tl.full([BLOCK_E], 1.0, tl.float32)
        g = tl.zeros([BLOCK_E], dtype=tl.float32)
        for ch in tl.static_range(F // FC):  # hidden units in chunks: fewer live registers
            h = ch * FC + tl.arange(0, FC)
            w1 = _load_weight(w1_ptr, tl.arange(0, KP), h, F, 1, DT, PREC)
            t = _hidden(basis, w1, tl.load(s1_ptr + h), tl.load(b1_ptr + h), DT, PREC)
            r = (1.0 - t * t) * mma(dbasis, w1, DT, PREC) * tl.load(s1_ptr + h)[None, :]
            w2t = _load_weight(w2t_ptr, f, h, F, 1, DT, PREC)  # rows of A2 for these units
            g += tl.sum(mma(sq, w2t, DT, PREC) * r, axis=1)  # <A2^T s, dt/dd>
        g = g * rmax
        if ENV_ON_FILTER:
            g = g * c
        tl.store(g_ptr + e, tl.load(g_ptr + e, mask=mask, other=0.0) + g, mask=mask)


def _kernel_args(filt: FilterParams, spec: RadialSpec, precision: str, F: int) -> dict:
    l1, l2 = filt.lin1, filt.lin2
    if l1.in_features != spec.num_basis:
        raise ValueError(f"filter expects K={l1.in_features}, basis has {spec.num_basis}")
    check_no_grad("cfconv", A1=l1.weight_t, a1=l1.bias, A2=l2.weight_t, b2=l2.bias)
    if l1.weight_t.shape[1] != F or l2.weight_t.shape != (F, F):
        raise ValueError(f"filter width {l1.weight_t.shape[1]} does not match xs width {F}")
    if precision not in PRECISIONS:
        raise ValueError(f"cfconv precision must be one of {PRECISIONS}, got {precision!r}")
    return dict(w1_ptr=l1.weight_t, s1_ptr=l1.scale, b1_ptr=l1.bias, w2_ptr=l2.weight_t,
                s2_ptr=l2.scale, F=F, KP=l1.weight_t.shape[0],
                b2_ptr=l2.bias, DT=torch_to_tl_dtype(filt.dtype), PREC=precision,
                **spec.kernel_args())


@functools.cache
def _num_sms(device_index: int) -> int:
    if INTERPRET or not torch.cuda.is_available():
        return 1
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _conv(pos, feat, other, ptr, perm, num_nodes, args, own=None, edge_out=None):
    """Launch `_conv_kernel`; returns ``[num_nodes, F]`` FP32."""
    out = torch.empty(num_nodes, args["F"], dtype=torch.float32, device=feat.device)
    if num_nodes:
        edge_dot = edge_out is not None
        sms = _num_sms(feat.device.index or 0)
        _conv_kernel[lambda meta: (min(num_nodes, sms * meta["PERSISTENT"]) if meta["PERSISTENT"]
                                   else num_nodes,)](
            pos, feat, other, ptr, perm, own if edge_dot else feat,
            edge_out if edge_dot else out, out_ptr=out, num_nodes=num_nodes,
            EDGE_DOT=edge_dot, **args)
    return out


def upper_edges(src, dst, csr: GraphCSR):
    """The edges ``src > dst`` of a symmetric graph, one per pair, in destination-layout order.

    Returns ``(order, count)``: int32 ``[E]`` (the first ``count`` entries are edge ids) and
    a 1-element int32 tensor, both on the device (no host synchronisation).
    """
    E = src.numel()
    order = torch.zeros(E + 1, dtype=torch.int32, device=src.device)
    if E == 0:
        return order[:0], order[:1]
    e = csr.dst_perm.long()
    upper = (torch.arange(E, device=src.device) < csr.dst_ptr[-1]) & (src[e] > dst[e])
    rank = torch.cumsum(upper, 0, dtype=torch.int32) - 1
    order.index_put_((torch.where(upper, rank.long(), E),), e.int())  # the rest to slot E
    return order[:E], rank[-1:] + 1


def _length_grad(pos, xs, gu, src, dst, order, count, g, args, w2t, pairs: bool):
    """Launch `_length_grad_kernel` over ``order[:count]`` (adds into ``g``)."""
    E = order.numel()
    if E:
        a = {k: v for k, v in args.items() if k not in ("b2_ptr", "w2_ptr")}  # no d(bias)/dd
        _length_grad_kernel[lambda meta: (triton.cdiv(meta["E"], meta["BLOCK_E"]),)](
            pos, xs, gu, src, dst, order, count, w2t_ptr=w2t, g_ptr=g, E=E, PAIRS=pairs, **a)


class _CFConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, xs, src, dst, csr, filt, spec, precision, symmetric):
        pos, xs = pos.contiguous(), xs.contiguous()
        args = _kernel_args(filt, spec, precision, xs.shape[1])
        out = _conv(pos, xs, src, csr.dst_ptr, csr.dst_perm, csr.num_nodes, args)
        ctx.save_for_backward(pos, xs, src, dst, *csr)
        ctx.args, ctx.symmetric, ctx.w2t = args, symmetric, filt.lin2_rows
        return out

    @staticmethod
    def backward(ctx, grad_u):
        pos, xs, src, dst, *csr = ctx.saved_tensors
        csr = GraphCSR(*csr)
        args, n = ctx.args, csr.num_nodes
        gu = grad_u.contiguous().float()
        on_filter = args["ENV_ON_FILTER"]
        # dE/dd_e: the envelope-derivative part from the transposed convolution (every valid
        # edge written), or zeros; then the filter-network part added per edge or per pair
        g = torch.empty if on_filter else torch.zeros
        g = g(src.numel(), dtype=torch.float32, device=xs.device)
        # grad_xs[j] = sum_{e: src_e = j} gu[dst_e] W_e: on a symmetric graph the edges into
        # j stand for those out of it (same W), so the destination layout serves
        layout = ((csr.dst_ptr, csr.dst_perm, src) if ctx.symmetric
                  else (csr.src_ptr, csr.src_perm, dst))
        grad_xs = _conv(pos, gu, layout[2], layout[0], layout[1], n, args,
                        own=xs, edge_out=g if on_filter else None)
        if xs.shape[0] > n:
            grad_xs = torch.cat([grad_xs, xs.new_zeros(xs.shape[0] - n, xs.shape[1])])
        if ctx.symmetric:
            order, count = upper_edges(src, dst, csr)
        else:
            order, count = csr.dst_perm, csr.dst_ptr[-1:]
        _length_grad(pos, xs, gu, src, dst, order, count, g, args, ctx.w2t, ctx.symmetric)
        grad_pos = edge_grad_to_positions(g, pos, src, dst, csr)
        return grad_pos, grad_xs, None, None, None, None, None, None, None


def cfconv(pos, xs, src, dst, csr: GraphCSR, filt: FilterParams, spec: RadialSpec,
           precision: str = "tf32", symmetric: bool = False):
    """Fused continuous-filter convolution of one interaction block (Triton).

    Parameters
    ----------
    pos : Tensor, float32 [P, 3]
        Flattened positions, ``P >= csr.num_nodes`` (extra rows, e.g. a padding node, are
        ignored and get zero gradient). May require grad.
    xs : Tensor, float32 [P', F]
        ``lin1(h)``, ``P' >= csr.num_nodes``; F a power of two >= 16. May require grad.
    src, dst : Tensor, int64 [E]
        Edge endpoints (message ``src -> dst``).
    csr : GraphCSR
        Both CSR layouts of these edges (`kernels.csr.build_csr`); padding edges are in no
        segment and contribute nothing.
    filt : FilterParams
        Packed filter network (`pack_filter`); its dtype selects FP32 or W16A16 GEMMs.
    spec : RadialSpec
        Basis and envelope.
    precision : {"tf32", "tf32x3", "ieee"}
        FP32 GEMM mode (`PRECISIONS`; ignored by 16-bit filters). The reductions onto nodes
        keep FP32 accuracy in every mode.
    symmetric : bool
        The valid edges come in pairs (``j -> i`` exactly when ``i -> j``), as in every graph
        the engine builds: the backward pass then walks the destination layout twice (no
        source layout) and evaluates the filter's derivative once per pair. Not checked (it
        would synchronise with the host); a graph that is not symmetric gives wrong gradients.

    Returns
    -------
    Tensor, float32 [csr.num_nodes, F]
        ``u_i = sum_{e: dst_e = i} xs[src_e] * W_e``. Gradients flow to ``pos`` and ``xs``
        only (recomputing the filter; see the module docstring); weights, biases and basis
        parameters get none.
    """
    return _CFConv.apply(pos, xs, src, dst, csr, filt, spec, precision, bool(symmetric))


def cfconv_reference(pos, xs, src, dst, csr: GraphCSR, filt: FilterParams, spec: RadialSpec,
                     precision: str = "ieee", symmetric: bool = False):
    """PyTorch reference of `cfconv` (materialises E x F; computes in ``pos.dtype``).

    Uses the filter's dequantized weights (``diag(s) Q``, exact for FP32 packing) and plain
    autograd, so it also differentiates float64 inputs for finite-difference checks.
    ``precision`` and ``symmetric`` are accepted for the same signature and change nothing.
    """
    valid = valid_edge_mask(csr)
    n = csr.num_nodes
    dtype = pos.dtype
    dist = reference_distances(pos, src, dst, valid)
    basis, env = radial_reference_terms(dist, spec)
    w1, b1 = (t.to(dtype) for t in filt.lin1.dequantized())
    w2, b2 = (t.to(dtype) for t in filt.lin2.dequantized())
    w = (torch.tanh(basis @ w1.t() + b1) @ w2.t() + b2) * env[:, None]
    msg = xs.to(dtype)[torch.where(valid, src, 0)] * w * valid[:, None]
    out = torch.zeros(n + 1, xs.shape[1], dtype=dtype, device=xs.device)
    return out.index_add(0, torch.where(valid, dst, n), msg)[:n]
