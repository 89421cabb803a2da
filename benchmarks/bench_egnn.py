"""CGEGNN energy and forces: the fused edge kernel against the reference path.

    python -m benchmarks.bench_egnn [--protein 1enh] [--replicas 64] [--repeats 20]
        [--device cuda] [--out result.json]

A randomly initialised CGEGNN (default `EGNNConfig`) on the exact graph of the native
structure plus 0.3 Å of noise. Times one force evaluation (energies and forces, CUDA events,
median of ``--repeats`` after a warm-up that autotunes) on the reference path and with
``fused_message_passing``; reports the fused path's relative RMS force error against the
FP32 and the float64 reference, and the peak memory of each path. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from workbench.files import atomic_write_json
from workbench.model.egnn import CGEGNN, EGNNConfig
from workbench.model.options import KernelOptions
from workbench.neighbors import NeighborList
from workbench.system import build_system


def forces(model, pos, types, graph, options=None):
    """Energies summed over nodes and forces ``-dE/dr`` of flattened positions."""
    pos = pos.detach().requires_grad_()
    energy = model(pos, types, graph, options).sum()
    (grad,) = torch.autograd.grad(energy, pos)
    return energy.detach(), -grad


def timed(fn, repeats: int, device: torch.device) -> float:
    """Median milliseconds of ``fn()`` (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def rel_rms(a, b) -> float:
    return float((a.double() - b.double()).pow(2).mean().sqrt() / b.double().pow(2).mean().sqrt())


def arguments(description: str, argv=None) -> argparse.Namespace:
    """The command line shared by the fused-versus-reference network benchmarks."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--protein", default="1enh")
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out")
    return parser.parse_args(argv)


def compare_paths(model: torch.nn.Module, args: argparse.Namespace) -> dict:
    """Time one force evaluation of ``model`` (seeded before it was built) on the reference
    path and with ``fused_message_passing``, with the fused path's errors; prints the JSON
    record and writes it to ``args.out`` if given."""
    device = torch.device(args.device)
    system = build_system(args.protein)
    model = model.to(device)
    native = system.native_positions.to(device=device, dtype=torch.float32)
    pos = native[None] + 0.3 * torch.randn(args.replicas, *native.shape, device=device)
    graph = NeighborList(system.n_beads, model.cutoff, skin=0.0).update(pos)
    types = system.bead_types.to(device).repeat(args.replicas)
    flat = pos.reshape(-1, 3)
    fused = KernelOptions(fused_message_passing=True)

    result = {"protein": args.protein, "replicas": args.replicas, "nodes": flat.shape[0],
              "edges": graph.num_edges, "config": model.config.to_dict(),
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__}
    e_ref, f_ref = forces(model, flat, types, graph)
    e_fused, f_fused = forces(model, flat, types, graph, fused)
    e64, f64 = forces(model.double(), flat.double(), types, graph)
    model.float()
    result["force_rel_rms_vs_fp32"] = rel_rms(f_fused, f_ref)
    result["force_rel_rms_vs_fp64"] = rel_rms(f_fused, f64)
    result["reference_force_rel_rms_vs_fp64"] = rel_rms(f_ref, f64)
    result["energy_rel_vs_fp64"] = float(abs(e_fused.double() - e64) / abs(e64))
    for name, options in (("reference", None), ("fused", fused)):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        result[f"{name}_ms"] = timed(lambda o=options: forces(model, flat, types, graph, o),
                                     args.repeats, device)
        if device.type == "cuda":
            result[f"{name}_peak_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
    result["speedup"] = result["reference_ms"] / result["fused_ms"]
    print(json.dumps(result, indent=1))
    if args.out:
        atomic_write_json(args.out, result)
    return result


def main(argv=None) -> dict:
    args = arguments(__doc__.splitlines()[0], argv)
    torch.manual_seed(0)
    return compare_paths(CGEGNN(EGNNConfig()), args)


if __name__ == "__main__":
    main()
