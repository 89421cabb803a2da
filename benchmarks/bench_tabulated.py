"""Full-size check and timing of `kernels.tabulated` next to the fused fp16 `cfconv`.

``python -m benchmarks.bench_tabulated`` (``--replicas``, ``--beads`` to change the size; runs
on CPU under ``TRITON_INTERPRET=1`` at small sizes as a smoke test). On the 1ENH x 64
benchmark graph of `benchmarks.bench_kernels`, with block 0 of its random CGSchNet:

1. tabulation error: the float64 reference with a table of the block's filter network
   (``G`` points on ``[0, r_c]``) against the float64 `cfconv` reference (the MLP itself);
2. kernel error: `tabulated_cfconv` (FP32 and FP16 ``xs``) against the float64 tabulated
   reference (same table), forward and both gradients;
3. median times (``do_bench``) of forward and forward + backward of one block, the
   autotuner's per-config times, and fp16 `cfconv` at its best configs from the notes.
"""

from __future__ import annotations

import argparse
import importlib

import torch

from benchmarks.bench_kernels import _bench, _rel, benchmark_setup, make_schnet_weights
from kernels import build_csr, cfconv, edge_distances, pack_filter
from kernels.cfconv import cfconv_reference
from kernels.edge_distances import edge_distances_reference
from kernels.radial_basis import radial_reference_terms
from kernels.tabulated import (
    evaluate_table,
    tabulate_filter,
    tabulated_cfconv,
    tabulated_cfconv_reference,
)

__all__ = ["mlp_filter", "main"]

def mlp_filter(A1, a1, A2, spec):
    """The filter network ``d [M] -> (A2 tanh(A1 e(d) + a1)) C(d)`` ``[M, F]`` in d's dtype."""

    def fn(d):
        basis, env = radial_reference_terms(d, spec)
        hidden = torch.tanh(basis @ A1.to(d.dtype).t() + a1.to(d.dtype))
        return (hidden @ A2.to(d.dtype).t()) * env[:, None]

    return fn


def _from_positions(lengths, conv):
    """``conv`` of the edge lengths that ``lengths`` computes: positions in, like `cfconv`."""

    def op(pos, xs, src, dst, csr, table):
        return conv(lengths(pos, src, dst, csr), xs, src, dst, csr, table)

    return op


TABULATED = _from_positions(edge_distances, tabulated_cfconv)
TABULATED_REFERENCE = _from_positions(edge_distances_reference, tabulated_cfconv_reference)


def _grads(op, pos, xs, graph, csr, table_or_filt, gu, *extra):
    pos = pos.clone().requires_grad_()
    xs = xs.clone().requires_grad_()
    u = op(pos, xs, graph["src"], graph["dst"], csr, table_or_filt, *extra)
    gp, gx = torch.autograd.grad((u * gu.to(u.dtype)).sum(), (pos, xs))
    return u.detach(), gp, gx


def _errs(a, b):
    return "u {:.1e}  grad pos {:.1e}  grad xs {:.1e}".format(*(_rel(x, y) for x, y in
                                                                zip(a, b, strict=True)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beads", type=int, default=269)
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--points", default="501,1001,2001", help="table sizes G for accuracy")
    args = ap.parse_args(argv)
    dev, graph = benchmark_setup(args.beads, args.replicas)
    pos, src, dst, n = graph["pos"], graph["src"], graph["dst"], graph["num_nodes"]
    csr = build_csr(src, dst, n)
    print(f"nodes {n}  edges {src.numel()}  ({src.numel() / n:.1f} per node)")
    weights = make_schnet_weights(device=dev)
    spec, b0 = weights["spec"], weights["blocks"][0]
    F = b0["A1"].shape[0]
    fn = mlp_filter(b0["A1"], b0["a1"], b0["A2"], spec)
    rc = spec.cutoff_upper
    xs = torch.randn(n, F, device=dev)
    gu = torch.randn(n, F, device=dev)
    p64, x64 = pos.double(), xs.double()

    # 1. tabulation error against the MLP itself (both float64)
    filt32 = pack_filter(b0["A1"], b0["a1"], b0["A2"], None, "fp32", spec)
    exact = _grads(cfconv_reference, p64, x64, graph, csr, filt32, gu, spec)
    d = torch.linspace(0.0, rc, 200_001, dtype=torch.float64, device=dev)[:-1]
    w_exact, dw_exact = torch.func.jvp(fn, (d,), (torch.ones_like(d),))
    tables = {}
    for G in (int(g) for g in args.points.split(",")):
        table = tables[G] = tabulate_filter(fn, G, rc, dev)
        tab = _grads(TABULATED_REFERENCE, p64, x64, graph, csr, table, gu)
        w, dw = torch.func.jvp(lambda x, t=table: evaluate_table(t, x), (d,),
                               (torch.ones_like(d),))
        werr = float((w - w_exact).abs().max() / w_exact.abs().max())
        dwerr = float((dw - dw_exact).abs().max() / dw_exact.abs().max())
        mib = sum(t.numel() * t.element_size() for t in (table.coeffs01, table.coeffs23)) / 2**20
        print(f"table G={G:5d} h={rc / (G - 1):.4f} A  {mib:.1f} MiB"
              f"  max|dW|/max|W| {werr:.1e}  max|dW'|/max|W'| {dwerr:.1e}  vs MLP: "
              f"{_errs(tab, exact)}", flush=True)
    table = tables[max(tables)]

    # 2. kernel against the float64 reference of the same table
    ref = _grads(TABULATED_REFERENCE, p64, x64, graph, csr, table, gu)
    feats = {"fp32 xs": xs, "fp16 xs": xs.half()}
    for name, x in feats.items():
        got = _grads(TABULATED, pos, x, graph, csr, table, gu)
        ref16 = ref if x.dtype == torch.float32 else _grads(
            TABULATED_REFERENCE, p64, x.double(), graph, csr, table, gu)
        print(f"kernel {name} vs float64 reference (G={max(tables)}): {_errs(got, ref16)}",
              flush=True)

    # 3. timings
    rows = []

    def fwd_bwd(op, x, *extra):
        p = pos.clone().requires_grad_()
        xx = x.clone().requires_grad_()

        def run():
            u = op(p, xx, src, dst, csr, *extra)
            torch.autograd.grad(u, (p, xx), gu)

        return run

    for name, x in feats.items():
        rows.append((f"tabulated fwd {name}",
                     _bench(lambda x=x: TABULATED(pos, x, src, dst, csr, table))))
        rows.append((f"tabulated fwd+bwd {name}", _bench(fwd_bwd(TABULATED, x, table))))
    # the benchmark graph is symmetric and sorted by (dst, src): the engine's walk
    symmetric = _from_positions(edge_distances, lambda *a: tabulated_cfconv(
        *a, symmetric=True, slots_are_edges=True))
    got = _grads(symmetric, pos, xs, graph, csr, table, gu)
    print(f"kernel fp32 xs, symmetric walk vs float64 reference: {_errs(got, ref)}", flush=True)
    rows.append(("tabulated fwd fp32 xs, slots are edges",
                 _bench(lambda: symmetric(pos, xs, src, dst, csr, table))))
    rows.append(("tabulated fwd+bwd fp32 xs, symmetric walk", _bench(fwd_bwd(symmetric, xs,
                                                                              table))))
    tab_mod = importlib.import_module("kernels.tabulated")
    for kern in ("_tab_fwd_kernel", "_tab_bwd_kernel"):
        k = getattr(tab_mod, kern)
        timings = getattr(k, "configs_timings", None) or {}
        print(kern, "best:", {key[-1:]: str(v) for key, v in k.cache.items()})
        for cfg, ms in timings.items():
            print(f"   {cfg}: {ms}")
    if dev == "cuda":
        cf = importlib.import_module("kernels.cfconv")
        filt16 = pack_filter(b0["A1"], b0["a1"], b0["A2"], None, "fp16", spec)
        # only the best configs of the notes' sweep (saves autotuning time)
        cf._cfconv_fwd_kernel.configs = [cf._cfg(16, 32, 128, 4)]
        cf._cfconv_bwd_kernel.configs = [cf._cfg(16, 32, 128, 4)]
        got = _grads(cfconv, pos, xs, graph, csr, filt16, gu, spec)
        print(f"cfconv fp16 vs float64 MLP reference: {_errs(got, exact)}")
        rows.append(("cfconv fwd fp16 (best cfg)",
                     _bench(lambda: cfconv(pos, xs, src, dst, csr, filt16, spec))))
        rows.append(("cfconv fwd+bwd fp16 (best cfg)",
                     _bench(fwd_bwd(cfconv, xs, filt16, spec))))
        print(f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    print(f"{'one block, E = ' + str(src.numel()):40s} {'ms':>8s}")
    for name, ms in rows:
        print(f"{name:40s} {ms:8.3f}")
    return rows


if __name__ == "__main__":
    main()
