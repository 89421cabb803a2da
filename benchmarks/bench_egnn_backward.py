"""One fused EGNN edge block, forward and backward, for both of its backward variants.

    python -m benchmarks.bench_egnn_backward [--protein 1enh] [--replicas 64] [--repeats 20]
        [--width 64] [--cutoff 10] [--operands fp32 fp16] [--device cuda] [--out result.json]

`kernels.egnn_edge` with ``saved="none"`` (the backward evaluates the edge MLP anew, two
launches) and ``saved="activations"`` (the forward stores the pre-activations, one backward
launch and a segment sum), each with FP32 operands (three TF32 products) and fp16 operands
(``--operands``). The block is the first layer of a randomly initialised default CGEGNN
(``--width`` sets its H and F, ``--cutoff`` its graph radius), ``xa`` and ``xb`` made from
the bead types' embeddings, on the exact graph of the native structure plus 0.3 Å of noise,
built as `benchmarks.bench_egnn` builds it. Each timing includes what a model does once per
step for all its layers: the lengths (`kernels.edge_distances`, forward and position
gradient) and the envelope (`kernels.egnn_edge.edge_envelopes`).

Per variant: the forward alone (inputs requiring grad, so the stored variant stores), the
forward and the backward to ``pos``, ``xa``, ``xb`` (CUDA events, median of ``--repeats``
after a warm-up that autotunes), their difference, the peak memory of forward and backward
beyond what was allocated before (``extra_peak_gb``), and the largest relative RMS
difference of ``u`` and the three gradients from the recomputing variant of the same
operands. Prints a table and the JSON record (with the GPU's name); writes the JSON to
``--out``. On a CPU under ``TRITON_INTERPRET=1`` it runs as a smoke test at a small size
(``--protein cln025 --replicas 1 --width 16 --cutoff 5 --repeats 1 --operands fp16``).
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import torch
from torch import nn

from benchmarks.bench_egnn import rel_rms, timed
from kernels import edge_distances, egnn_edge
from kernels.egnn_edge import SAVED
from workbench.files import atomic_write_json
from workbench.model.egnn import CGEGNN, EGNNConfig, packed_edges
from workbench.model.fused_schnet import real_edge_graph
from workbench.neighbors import NeighborList
from workbench.system import build_system

#: Operand types timed: `CGEGNN` precision names (`KernelOptions.mlp_precision`).
PRECISIONS = ("fp32", "fp16")


def arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protein", default="1enh")
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--width", type=int, default=64, help="H and F of the network")
    parser.add_argument("--cutoff", type=float, default=EGNNConfig.cutoff, help="r_c, Å")
    parser.add_argument("--operands", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out")
    return parser.parse_args(argv)


def edge_block(args: argparse.Namespace) -> dict:
    """The first layer's edge-block inputs on the benchmark graph: ``pos [N, 3]``, ``xa``,
    ``xb``, a fixed ``gu = dL/du`` (``[N, F]``), ``src``, ``dst``, ``csr``, the model and
    the graph's record fields."""
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = CGEGNN(EGNNConfig(hidden=args.width, edge_width=args.width,
                              cutoff=args.cutoff)).to(device)
    system = build_system(args.protein)
    native = system.native_positions.to(device=device, dtype=torch.float32)
    pos = native[None] + 0.3 * torch.randn(args.replicas, *native.shape, device=device)
    graph = NeighborList(system.n_beads, model.cutoff, skin=0.0).update(pos)
    types = system.bead_types.to(device).repeat(args.replicas)
    flat = pos.reshape(-1, 3)
    src, dst, csr, _ = real_edge_graph(model, flat, graph)
    with torch.no_grad():
        h = model.embedding_layer(types)
        layer, hidden = model.layers[0], model.config.hidden
        w1 = layer.edge_lin1.weight
        xa = nn.functional.linear(h, w1[:, :hidden], layer.edge_lin1.bias)
        xb = nn.functional.linear(h, w1[:, hidden : 2 * hidden])
    gu = torch.randn(flat.shape[0], model.config.edge_width, device=device)
    return dict(pos=flat, xa=xa, xb=xb, gu=gu, src=src, dst=dst, csr=csr, model=model,
                nodes=flat.shape[0], edges=graph.num_edges, edge_slots=src.numel())


def run_block(block: dict, precision: str, saved: str, backward: bool = True):
    """``u`` (and, with ``backward``, its gradients w.r.t. ``pos``, ``xa``, ``xb`` for
    ``dL/du = gu``) of the block with the weights packed in ``precision``."""
    model = block["model"]
    packed = packed_edges(model, precision)
    pos, xa, xb = (block[k].detach().requires_grad_() for k in ("pos", "xa", "xb"))
    dist = edge_distances(pos, block["src"], block["dst"], block["csr"])
    u = egnn_edge(dist, xa, xb, block["src"], block["dst"], block["csr"], packed.layers[0],
                  packed.spec, activation=model.config.activation, saved=saved)
    if not backward:
        return (u,)
    return (u.detach(), *torch.autograd.grad(u, (pos, xa, xb), block["gu"]))


def measure(args: argparse.Namespace) -> dict:
    """Time every (operands, saved) pair; the JSON record."""
    device = torch.device(args.device)
    block = edge_block(args)
    record = {"protein": args.protein, "replicas": args.replicas, "nodes": block["nodes"],
              "edges": block["edges"], "edge_slots": block["edge_slots"], "width": args.width,
              "cutoff": args.cutoff, "num_rbf": block["model"].config.num_rbf,
              "repeats": args.repeats,
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "results": []}
    for precision in args.operands:
        recomputed = run_block(block, precision, "none")
        for saved in SAVED:
            values = run_block(block, precision, saved)
            row = {"operands": precision, "saved": saved,
                   "rel_rms_vs_none": max(rel_rms(a, b) for a, b in zip(values, recomputed,
                                                                       strict=True))}
            row["forward_ms"] = timed(partial(run_block, block, precision, saved, False),
                                      args.repeats, device)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
                before = torch.cuda.memory_allocated(device)
            row["forward_backward_ms"] = timed(partial(run_block, block, precision, saved),
                                               args.repeats, device)
            if device.type == "cuda":
                row["extra_peak_gb"] = (torch.cuda.max_memory_allocated(device) - before) / 1e9
            row["backward_ms"] = row["forward_backward_ms"] - row["forward_ms"]
            record["results"].append(row)
    return record


def table(record: dict) -> str:
    """The record's timings as a Markdown table."""
    lines = [f"{record['protein']} x {record['replicas']}, {record['edges']} edges, "
             f"F = {record['width']}, {record['device']}",
             "| operands | saved | forward ms | forward + backward ms | backward ms | extra GB "
             "| rel. RMS vs none |", "|---|---|---|---|---|---|---|"]
    for r in record["results"]:
        peak = f"{r['extra_peak_gb']:.3f}" if "extra_peak_gb" in r else "-"
        lines.append(f"| {r['operands']} | {r['saved']} | {r['forward_ms']:.3f} | "
                     f"{r['forward_backward_ms']:.3f} | {r['backward_ms']:.3f} | {peak} | "
                     f"{r['rel_rms_vs_none']:.1e} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    args = arguments(argv)
    record = measure(args)
    print(table(record))
    print(json.dumps(record, indent=1))
    if args.out:
        atomic_write_json(args.out, record)
    return record


if __name__ == "__main__":
    main()
