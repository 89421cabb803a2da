"""Full-size GPU check and timing of every kernel against its PyTorch reference.

Run on a CUDA machine: ``python -m benchmarks.bench_kernels`` (``--replicas``, ``--beads`` to
change the size). The default size is the 1ENH benchmark: 269 beads x 64 replicas, cutoff
10 A, about 68 neighbours per bead (a random compact globule of the protein's density), with
the default CGSchNet sizes K = 50, F = H = 128, 3 blocks. It prints accuracy (relative to a
float64 PyTorch reference) and median times (``triton.testing.do_bench``) as compact tables.
"""

from __future__ import annotations

import argparse
import importlib
import math
import time

import torch
import triton

from kernels import (
    OPS,
    RadialSpec,
    build_csr,
    build_csr_sorted_pairs,
    cfconv,
    edge_grad_to_positions,
    pack_filter,
    pack_linear,
    radial_basis,
    segment_sum,
    tanh_linear,
)

# (BLOCK_N, BLOCK_E, FC, num_warps, num_stages) tried by --sweep
#: (BLOCK_E, num_warps, PERSISTENT (programs per SM, 0: one per node) for the convolution,
#: FC for the length gradient)
#: candidates of ``--sweep``
SWEEP = [(16, 4, 0, 32), (16, 4, 2, 64), (16, 4, 3, 128), (32, 8, 0, 128), (32, 8, 2, 64),
         (64, 8, 0, 128)]

__all__ = ["make_benchmark_graph", "make_schnet_weights", "pack_schnet", "schnet_energy",
           "energy_and_forces", "sweep_cfconv", "main"]


def benchmark_setup(beads: int, replicas: int):
    """Device (CUDA, else the interpreter on CPU) and benchmark graph; prints the versions."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    gpu = torch.cuda.get_device_name() if dev == "cuda" else "none (interpreter smoke run)"
    print(f"GPU {gpu}  torch {torch.__version__}  triton {__import__('triton').__version__}")
    return dev, make_benchmark_graph(beads, replicas, device=dev)


def make_benchmark_graph(beads=269, replicas=64, cutoff=10.0, degree=68.0, device="cuda",
                         seed=0):
    """Random globules (one per replica) and their cutoff graph, sorted by dst.

    Beads are uniform in a ball whose radius gives about ``degree`` neighbours within
    ``cutoff`` per bead (boundary included), like a folded protein of ``beads`` CG beads.

    Returns
    -------
    dict with ``pos [R*beads, 3]`` float32, ``src``/``dst`` int64 ``[E]`` and ``types``.
    """
    g = torch.Generator(device="cpu").manual_seed(seed)
    # mean neighbours in a ball of radius R at cutoff rc: n (rc/R)^3 (1 - 9/16 rc/R + ...)
    radius = cutoff * (beads / degree) ** (1 / 3)
    for _ in range(30):
        x = cutoff / radius
        radius *= ((beads * x**3 * (1 - 0.5625 * x + 0.0625 * x**3)) / degree) ** (1 / 3)
    u = torch.randn(replicas, beads, 3, generator=g)
    u = u / u.norm(dim=-1, keepdim=True) * torch.rand(replicas, beads, 1, generator=g) ** (1 / 3)
    pos = (u * radius).to(device)
    dist = (pos[:, :, None] - pos[:, None]).pow(2).sum(-1).sqrt()  # exactly symmetric
    eye = torch.eye(beads, dtype=torch.bool, device=device)
    r, i, j = torch.nonzero((dist < cutoff) & ~eye, as_tuple=True)
    types = torch.randint(1, 25, (beads,), generator=g).repeat(replicas).to(device)
    return dict(pos=pos.reshape(-1, 3).contiguous(), dst=r * beads + i, src=r * beads + j,
                types=types, num_nodes=replicas * beads)


def make_schnet_weights(K=50, F=128, H=128, blocks=3, cutoff=10.0, device="cuda", seed=0):
    """Random CGSchNet weights (mlcg initialisation scales) and its Gaussian basis spec."""
    g = torch.Generator(device="cpu").manual_seed(seed)

    def lin(o, i, bias=True):
        w = (torch.rand(o, i, generator=g) * 2 - 1) / math.sqrt(i)
        b = (torch.rand(o, generator=g) * 2 - 1) / math.sqrt(i) if bias else None
        return w.to(device), b.to(device) if b is not None else None

    mu = torch.linspace(0.0, cutoff, K, device=device)
    spec = RadialSpec.gaussian(mu, -0.5 / float(mu[1] - mu[0]) ** 2, cutoff,
                               envelope_in_basis=True)
    blocks_w = []
    for _ in range(blocks):
        A1, a1 = lin(F, K)
        A2, _ = lin(F, F, bias=False)
        blocks_w.append(dict(A1=A1, a1=a1, A2=A2, L1=lin(F, H, False)[0], L2=lin(H, F),
                             L3=lin(H, H)))
    emb = torch.randn(25, H, generator=g).to(device)
    out = [lin(H // 2, H), lin(1, H // 2, bias=False)]
    return dict(spec=spec, blocks=blocks_w, emb=emb, out=out)


def pack_schnet(weights, dtype="fp32"):
    """Packed layers of `make_schnet_weights` for the fused path (``dtype`` of all MLPs)."""
    spec = weights["spec"]
    packed = []
    for b in weights["blocks"]:
        packed.append(dict(filt=pack_filter(b["A1"], b["a1"], b["A2"], None, dtype, spec),
                           lin2=pack_linear(*b["L2"], dtype), lin3=pack_linear(*b["L3"], dtype),
                           L1=b["L1"]))
    out = [pack_linear(w, b, dtype) for w, b in weights["out"]]
    return dict(spec=spec, blocks=packed, emb=weights["emb"], out=out)


def schnet_energy(pos, graph, csr, packed, use_triton=True, precision="tf32x3"):
    """CGSchNet energy (summed over all beads) through the registry's ops."""
    conv = OPS["cfconv"].triton if use_triton else OPS["cfconv"].reference
    lin = OPS["linear"].triton if use_triton else OPS["linear"].reference
    h = packed["emb"][graph["types"]].to(pos.dtype)
    for b in packed["blocks"]:
        xs = h @ b["L1"].to(pos.dtype).t()
        u = conv(pos, xs, graph["src"], graph["dst"], csr, b["filt"], packed["spec"], precision,
                 True)  # the benchmark graph is symmetric
        v = lin(u, b["lin2"], None, precision)
        h = h + lin(v, b["lin3"], "tanh", precision)
    o0, o1 = packed["out"]
    return lin(lin(h, o0, None, precision), o1, "tanh", precision).sum()


def energy_and_forces(pos, graph, csr, packed, use_triton, precision="tf32x3"):
    pos = pos.detach().requires_grad_()
    energy = schnet_energy(pos, graph, csr, packed, use_triton, precision)
    (grad,) = torch.autograd.grad(energy, pos)
    return energy.detach(), -grad


def _rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def _bench(fn, rep=200):
    """Median ms by ``do_bench`` on CUDA; on CPU (interpreter smoke runs) one timed call."""
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=rep, return_mode="median")


def _row(table, name, ms=None, ref_ms=None, err=None, note=""):
    table.append((name, ms, ref_ms, err, note))
    speed = f"{ref_ms / ms:7.1f}x" if ms and ref_ms else "        "
    ms_s = f"{ms:9.3f}" if ms is not None else "        -"
    ref_s = f"{ref_ms:9.3f}" if ref_ms is not None else "        -"
    err_s = f"{err:9.2e}" if err is not None else "        -"
    print(f"{name:38s} {ms_s} {ref_s} {speed} {err_s}  {note}", flush=True)


def sweep_cfconv(graph, csr, weights, modes, configs):
    """Time the raw cfconv kernels (convolution, transposed convolution with the per-edge
    envelope term, per-pair length gradient) over explicit configs; print registers,
    spills and shared memory of each."""
    cf = importlib.import_module("kernels.cfconv")
    pos, src, dst, n = graph["pos"], graph["src"], graph["dst"], graph["num_nodes"]
    b0, spec = weights["blocks"][0], weights["spec"]
    F = b0["A1"].shape[0]
    xs = torch.randn(n, F, device=pos.device)
    gu = torch.randn(n, F, device=pos.device)
    out = torch.empty(n, F, device=pos.device)
    g = torch.zeros(src.numel(), device=pos.device)
    order, count = cf.upper_edges(src, dst, csr)
    sms = cf._num_sms(pos.device.index or 0)
    print(f"{'kernel':6s} {'mode':5s} {'BE':>3s} {'w':>2s} {'var':>5s} "
          f"{'ms':>8s} {'regs':>5s} {'spill':>6s} {'smem':>7s}")
    for mode in modes:
        dtype, prec = ("fp32", mode) if mode in cf.PRECISIONS else (mode, "tf32")
        filt = pack_filter(b0["A1"], b0["a1"], b0["A2"], None, dtype, spec)
        args = cf._kernel_args(filt, spec, prec, F)
        grad_args = {k: v for k, v in args.items() if k not in ("b2_ptr", "w2_ptr")}
        for be, w, persistent, fc in configs:
            calls = {
                "conv": (cf._conv_kernel.fn, (min(n, sms * persistent) if persistent else n,),
                         (pos, xs, src, csr.dst_ptr, csr.dst_perm, xs, out),
                         dict(out_ptr=out, num_nodes=n, EDGE_DOT=False, PERSISTENT=persistent,
                              **args), f"P{persistent}"),
                "convT": (cf._conv_kernel.fn, (min(n, sms * persistent) if persistent else n,),
                          (pos, gu, src, csr.dst_ptr, csr.dst_perm, xs, g),
                          dict(out_ptr=out, num_nodes=n, EDGE_DOT=True, PERSISTENT=persistent,
                               **args), f"P{persistent}"),
                "dW/dd": (cf._length_grad_kernel.fn, (triton.cdiv(src.numel(), be),),
                          (pos, xs, gu, src, dst, order, count),
                          dict(w2t_ptr=filt.lin2_rows, g_ptr=g, E=src.numel(), PAIRS=True,
                               FC=min(fc, F),
                               **grad_args), f"FC{min(fc, F)}"),
            }
            for name, (fn, grid, pargs, kw, variant) in calls.items():

                def launch(fn=fn, grid=grid, pargs=pargs, kw=kw, be=be, w=w):
                    return fn[grid](*pargs, BLOCK_E=be, num_warps=w, num_stages=1, **kw)

                try:
                    k = launch()
                    ms = _bench(launch, rep=50)
                    print(f"{name:6s} {mode:5s} {be:3d} {w:2d} {variant:>5s} {ms:8.3f} "
                          f"{k.n_regs:5d} {k.n_spills:6d} {k.metadata.shared:7d}", flush=True)
                except Exception as exc:
                    print(f"{name:6s} {mode:5s} {be:3d} {w:2d} {variant:>5s} failed: "
                          f"{type(exc).__name__} {str(exc)[:80]}", flush=True)


def verlet_list_graph(beads, replicas, cutoff=10.0, skin=2.0, spare=0.1, device="cuda"):
    """The candidate graph an MD step's neighbour list holds: the globules of
    `make_benchmark_graph`, every pair within ``cutoff + skin``, sorted by (dst, src), then
    ``spare`` of that many padding slots (endpoints ``num_nodes``, outside every segment)."""
    ratio = ((cutoff + skin) / cutoff) ** 3  # same globules, a larger sphere of neighbours
    graph = make_benchmark_graph(beads, replicas, cutoff + skin, 68.0 * ratio, device)
    pad = torch.full((int(spare * graph["src"].numel()),), graph["num_nodes"],
                     dtype=torch.int64, device=device)
    graph["src"], graph["dst"] = torch.cat([graph["src"], pad]), torch.cat([graph["dst"], pad])
    return graph


def _verlet_csr_rows(table, beads, replicas, dev):
    """Both CSR builds on the MD step's kind of graph (`verlet_list_graph`)."""
    graph = verlet_list_graph(beads, replicas, device=dev)
    src, dst, n = graph["src"], graph["dst"], graph["num_nodes"]
    ref = OPS["build_csr"].reference(src, dst, n)
    ref_ms = _bench(lambda: OPS["build_csr"].reference(src, dst, n))
    print(f"Verlet list: {src.numel()} edge slots ({src.numel() / n:.1f} per node, padding "
          "included)")
    for name, build in (("build_csr", build_csr),
                        ("build_csr_sorted_pairs", build_csr_sorted_pairs)):
        same = all(torch.equal(a, b) for a, b in zip(build(src, dst, n), ref, strict=True))
        _row(table, f"{name} (Verlet list)", _bench(lambda b=build: b(src, dst, n)), ref_ms,
             0.0 if same else 1.0, "exact match" if same else "MISMATCH")


def _pair_search_rows(table, pos, beads, replicas, cutoff=10.0):
    """The pair search (positions to sorted edges and both CSR layouts) against its dense
    PyTorch reference, on the benchmark's globules."""
    from kernels.pair_search import pair_search_csr, pair_search_csr_reference

    p = pos.reshape(replicas, beads, 3)
    allowed = ~torch.eye(beads, dtype=torch.bool, device=pos.device)
    capacity = math.ceil(1.25 * int(pair_search_csr(p, allowed, cutoff, p.numel() * beads)
                                    .needed))
    got = pair_search_csr(p, allowed, cutoff, capacity)
    ref = pair_search_csr_reference(p, allowed, cutoff, capacity)
    same = all(torch.equal(a.long(), b.long())
               for a, b in zip((got.src, got.dst, *got.csr), (ref.src, ref.dst, *ref.csr),
                               strict=True))
    _row(table, "pair_search_csr (positions -> CSRs)",
         _bench(lambda: pair_search_csr(p, allowed, cutoff, capacity)),
         _bench(lambda: pair_search_csr_reference(p, allowed, cutoff, capacity)),
         0.0 if same else 1.0, "exact match" if same else "MISMATCH (a pair at the cutoff?)")


def _langevin_rows(table, beads, replicas, dev):
    """The two Langevin kernels against their PyTorch references."""
    from kernels.langevin import langevin_drift, langevin_finish

    g = torch.Generator(device=dev).manual_seed(0)
    pos, vel, forces, noise = (torch.randn(replicas, beads, 3, generator=g, device=dev)
                               for _ in range(4))
    inv_mass = torch.full((beads, 1), 418.4 / 110.0, device=dev)
    kt = torch.full((replicas,), 0.596, device=dev)
    args = (pos, vel, forces, inv_mass, kt, noise, 0.004, 0.996, 0.0894)
    drift, drift_ref = langevin_drift(*args), OPS["langevin_drift"].reference(*args)
    _row(table, "langevin_drift", _bench(lambda: langevin_drift(*args)),
         _bench(lambda: OPS["langevin_drift"].reference(*args)), _rel(drift[0], drift_ref[0]))
    old = (pos, vel, forces, torch.zeros(replicas, device=dev),
           torch.zeros(replicas, dtype=torch.bool, device=dev),
           torch.full((replicas,), -1, device=dev))
    fin = (old, *drift, forces, torch.ones(replicas, device=dev), inv_mass, 0.004, 1e4, 266.0,
           torch.tensor(1, device=dev))
    _row(table, "langevin_finish (kick, checks, freeze)", _bench(lambda: langevin_finish(*fin)),
         _bench(lambda: OPS["langevin_finish"].reference(*fin)),
         _rel(langevin_finish(*fin)[1], OPS["langevin_finish"].reference(*fin)[1]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beads", type=int, default=269)
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--modes", default="ieee,tf32,tf32x3,fp16,bf16")
    ap.add_argument("--basis", type=int, default=50, help="K")
    ap.add_argument("--features", type=int, default=128, help="F = H")
    ap.add_argument("--sweep", action="store_true", help="only sweep cfconv kernel configs")
    args = ap.parse_args(argv)
    dev, graph = benchmark_setup(args.beads, args.replicas)
    pos, src, dst, n = graph["pos"], graph["src"], graph["dst"], graph["num_nodes"]
    E = src.numel()
    print(f"nodes {n}  edges {E}  ({E / args.replicas:.0f} per replica, "
          f"{E / n:.1f} per node)")
    K, F = args.basis, args.features
    weights = make_schnet_weights(K, F, F, device=dev)
    spec = weights["spec"]
    if args.sweep:
        sweep_cfconv(graph, build_csr(src, dst, n), weights, args.modes.split(","), SWEEP)
        return []
    table = []
    print(f"{'op':38s} {'ms':>9s} {'ref ms':>9s} {'speedup':>8s} {'rel err':>9s}")

    # CSR build
    csr = build_csr(src, dst, n)
    ref = OPS["build_csr"].reference(src, dst, n)
    shuffled = torch.randperm(E, device=dev)
    shuffled_csr = build_csr(src[shuffled], dst[shuffled], n)
    shuffled_ref = OPS["build_csr"].reference(src[shuffled], dst[shuffled], n)
    same = all(torch.equal(a, b) for a, b in zip(csr + shuffled_csr, ref + shuffled_ref,
                                                 strict=True))
    csr_ref_ms = _bench(lambda: OPS["build_csr"].reference(src, dst, n))
    _row(table, "build_csr (both layouts)", _bench(lambda: build_csr(src, dst, n)),
         csr_ref_ms, 0.0 if same else 1.0, "exact match" if same else "MISMATCH")
    paired = build_csr_sorted_pairs(src, dst, n)  # the graph is sorted by (dst, src), symmetric
    same = all(torch.equal(a, b) for a, b in zip(paired, ref, strict=True))
    _row(table, "build_csr_sorted_pairs (both layouts)",
         _bench(lambda: build_csr_sorted_pairs(src, dst, n)), csr_ref_ms,
         0.0 if same else 1.0, "exact match" if same else "MISMATCH")
    _verlet_csr_rows(table, args.beads, args.replicas, dev)
    _pair_search_rows(table, pos, args.beads, args.replicas)
    _langevin_rows(table, args.beads, args.replicas, dev)

    # radial basis
    pos64 = pos.double().requires_grad_()
    d_ref, e_ref, c_ref = OPS["radial_basis"].reference(pos64, src, dst, csr, spec)
    p32 = pos.clone().requires_grad_()
    d_k, e_k, c_k = radial_basis(p32, src, dst, csr, spec)
    w_e = torch.randn_like(e_k)
    (g_k,) = torch.autograd.grad((e_k * w_e).sum() + c_k.sum(), p32)
    (g_r,) = torch.autograd.grad((e_ref * w_e.double()).sum() + c_ref.sum(), pos64)
    _row(table, "radial_basis fwd", _bench(lambda: radial_basis(pos, src, dst, csr, spec)),
         _bench(lambda: OPS["radial_basis"].reference(pos, src, dst, csr, spec)),
         max(_rel(e_k, e_ref), _rel(d_k, d_ref)))

    def rb_fb(op):
        p = pos.clone().requires_grad_()
        _, e, c = op(p, src, dst, csr, spec)
        torch.autograd.grad((e * w_e).sum() + c.sum(), p)

    _row(table, "radial_basis fwd+bwd", _bench(lambda: rb_fb(radial_basis)),
         _bench(lambda: rb_fb(OPS["radial_basis"].reference)), _rel(g_k, g_r), "grad pos")

    # segment sum
    m = torch.randn(E, F, device=dev)
    s_k = segment_sum(m, csr.dst_ptr, csr.dst_perm)
    s_r = OPS["segment_sum"].reference(m.double(), csr.dst_ptr, csr.dst_perm)
    _row(table, "segment_sum fwd [E,128]", _bench(lambda: segment_sum(m, csr.dst_ptr,
                                                                      csr.dst_perm)),
         _bench(lambda: torch.zeros(n, F, device=dev).index_add_(0, dst, m)), _rel(s_k, s_r),
         "ref: index_add_")
    gk = torch.randn(E, device=dev)
    _row(table, "edge_grad_to_positions",
         _bench(lambda: edge_grad_to_positions(gk, pos, src, dst, csr)),
         _bench(lambda: OPS["edge_grad_to_positions"].reference(gk, pos, src, dst, csr)),
         _rel(edge_grad_to_positions(gk, pos, src, dst, csr),
              OPS["edge_grad_to_positions"].reference(gk.double(), pos.double(), src, dst,
                                                      csr)))

    # cfconv, one block
    b0 = weights["blocks"][0]
    xs = torch.randn(n, F, device=dev)
    gu = torch.randn(n, F, device=dev)
    filt32 = pack_filter(b0["A1"], b0["a1"], b0["A2"], None, "fp32", spec)
    p64 = pos.double().requires_grad_()
    x64 = xs.double().requires_grad_()
    u_r = OPS["cfconv"].reference(p64, x64, src, dst, csr, filt32, spec)
    gp_r, gx_r = torch.autograd.grad((u_r * gu.double()).sum(), (p64, x64))
    u_r = u_r.detach()
    flops_fwd = 2 * E * (K * F + F * F)
    p_ref = pos.clone().requires_grad_()
    x_ref = xs.clone().requires_grad_()

    def ref_fb():
        u = OPS["cfconv"].reference(p_ref, x_ref, src, dst, csr, filt32, spec)
        torch.autograd.grad((u * gu).sum(), (p_ref, x_ref))

    ref_fwd_ms = _bench(lambda: OPS["cfconv"].reference(pos, xs, src, dst, csr, filt32, spec))
    ref_fb_ms = _bench(ref_fb)
    for mode in args.modes.split(","):
        dtype, prec = ("fp32", mode) if mode in ("ieee", "tf32x3", "tf32") else (mode, "tf32")
        try:
            filt = pack_filter(b0["A1"], b0["a1"], b0["A2"], None, dtype, spec)
            t0 = time.time()
            p = pos.clone().requires_grad_()
            x = xs.clone().requires_grad_()
            u = cfconv(p, x, src, dst, csr, filt, spec, prec, True)
            gp, gx = torch.autograd.grad((u * gu).sum(), (p, x))
            if dev == "cuda":
                torch.cuda.synchronize()
            tune_s = time.time() - t0
            fwd = _bench(lambda f=filt, pr=prec: cfconv(pos, xs, src, dst, csr, f, spec, pr,
                                                         True))

            def fb(f=filt, pr=prec, p=p, x=x):
                u = cfconv(p, x, src, dst, csr, f, spec, pr, True)
                torch.autograd.grad((u * gu).sum(), (p, x))

            fbms = _bench(fb)
            _row(table, f"cfconv fwd {mode}", fwd, ref_fwd_ms, _rel(u, u_r),
                 f"{flops_fwd / fwd / 1e9:.0f} TFLOP/s; tune+compile {tune_s:.0f}s")
            _row(table, f"cfconv fwd+bwd {mode}", fbms, ref_fb_ms,
                 max(_rel(gp, gp_r), _rel(gx, gx_r)),
                 f"grad pos {_rel(gp, gp_r):.1e} xs {_rel(gx, gx_r):.1e}; "
                 f"{3 * flops_fwd / fbms / 1e9:.0f} TFLOP/s")
        except Exception as exc:  # keep going: one failing mode must not hide the others
            print(f"cfconv {mode} FAILED: {type(exc).__name__}: {exc}"[:2000], flush=True)
    cf_mod = importlib.import_module("kernels.cfconv")
    for kern in ("_conv_kernel", "_length_grad_kernel"):
        cache = getattr(cf_mod, kern).cache
        print(kern, "best configs:", {k[-2:]: str(v) for k, v in cache.items()})

    # fused update
    v = torch.randn(n, F, device=dev)
    gy = torch.randn(n, F, device=dev)
    calib = torch.tanh(v[:4096])
    L3w, L3b = b0["L3"]
    y_ref = torch.tanh(v.double()) @ L3w.double().t() + L3b.double()
    for dtype in ("fp32", "fp16", "bf16"):
        layer = pack_linear(L3w, L3b, dtype, calib=calib)
        vv = v.clone().requires_grad_()

        def upd_fb(layer=layer, vv=vv):
            torch.autograd.grad((tanh_linear(vv, layer) * gy).sum(), vv)

        def upd_ref(vv=vv):
            torch.autograd.grad(((torch.tanh(vv) @ L3w.t() + L3b) * gy).sum(), vv)

        _row(table, f"tanh_linear fwd+bwd {dtype}", _bench(upd_fb), _bench(upd_ref),
             _rel(tanh_linear(v, layer), y_ref))

    # whole model: CSR + 3 blocks forward + forces
    p64 = pos.double()
    packed_ref = pack_schnet(weights, "fp32")
    e_ref, f_ref = energy_and_forces(p64, graph, csr, packed_ref, False)
    t_ref = _bench(lambda: energy_and_forces(pos, graph, build_csr(src, dst, n), packed_ref,
                                          False), rep=100)
    for mode in args.modes.split(","):
        dtype, prec = ("fp32", mode) if mode in ("ieee", "tf32x3", "tf32") else (mode, "tf32")
        if mode == "ieee":
            continue
        try:
            packed = pack_schnet(weights, dtype)
            e_k, f_k = energy_and_forces(pos, graph, csr, packed, True, prec)

            def step(packed=packed, prec=prec):
                energy_and_forces(pos, graph, build_csr(src, dst, n), packed, True, prec)

            ms = _bench(step, rep=100)
            rms = float(((f_k.double() - f_ref) ** 2).mean().sqrt() / (f_ref**2).mean().sqrt())
            _row(table, f"SchNet E+F (3 blocks, csr) {mode}", ms, t_ref, rms,
                 f"force RMS err / RMS; dE/E {_rel(e_k, e_ref):.1e}; "
                 f"{args.replicas * 1000 / ms:.0f} mol/s model-only")
        except Exception as exc:
            print(f"model {mode} FAILED: {type(exc).__name__}: {exc}"[:2000], flush=True)
    if dev == "cuda":
        print(f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    return table


if __name__ == "__main__":
    main()
