"""Aggregate throughput of a sharded run on N GPUs against 1 GPU; writes JSON.

    python -m benchmarks.multi_gpu_bench --protein 1enh --replicas-per-gpu 64 --steps 200 \
        --out artifacts/multi_gpu/results.json

Each configuration is limited by --timeout (default 80 s); the defaults finish in
well under 3 minutes on two H200s. Exit code 1 if a configuration failed (its error
is in the JSON). See workbench/distributed/scaling.py.
"""

import argparse
import sys

import torch

from workbench.distributed.scaling import scaling, write_scaling
from workbench.model.options import KernelOptions
from workbench.runner import RunSettings


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.multi_gpu_bench``: see ``--help``."""
    parser = argparse.ArgumentParser(
        description="Aggregate throughput (timestep·mol/s) of a sharded run on N GPUs "
        "against 1 GPU, in one run; writes JSON."
    )
    parser.add_argument("--protein", default="1enh")
    parser.add_argument("--replicas-per-gpu", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=None, help="default: all visible GPUs")
    parser.add_argument("--steps", type=int, default=200, help="timed steps")
    parser.add_argument(
        "--report-interval",
        type=int,
        default=50,
        help="steps between gathered metrics; the first interval is untimed warm-up",
    )
    parser.add_argument("--kernels", default="baseline",
                        help="a KernelOptions.parse name: baseline, all, tables+graph-fp16, ...")
    parser.add_argument("--device", default="auto", help="auto, cuda, or cpu (gloo processes)")
    parser.add_argument(
        "--timeout", type=float, default=80.0, help="limit on each configuration, s"
    )
    parser.add_argument("--out", default="artifacts/multi_gpu/results.json")
    args = parser.parse_args(argv)

    cuda = args.device != "cpu" and torch.cuda.is_available()
    gpus = args.gpus or (torch.cuda.device_count() if cuda else 2)
    settings = RunSettings(
        protein=args.protein,
        steps=args.report_interval + args.steps,
        save_interval=args.report_interval,
        device=args.device,
        options=KernelOptions.parse(args.kernels),
    )
    result = scaling(settings, gpus, args.replicas_per_gpu, args.timeout)
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks.multi_gpu_bench", *given])
    path = write_scaling(result, settings, args.out, command)
    for record in result["records"]:
        if "error" in record:
            print(f"{record['ranks']} rank(s): FAILED\n{record['error']}")
        else:
            print(
                f"{record['ranks']} {record['backend']} rank(s), {record['replicas']} replicas: "
                f"{record['timestep_mol_per_s']:,.0f} timestep·mol/s "
                f"(per rank {', '.join(f'{r:,.0f}' for r in record['rank_timestep_mol_per_s'])})"
            )
    if result["speedup"] is not None:
        print(f"speed-up {result['speedup']:.2f}× on {gpus}, efficiency {result['efficiency']:.0%}")
    print(f"wrote {path}")
    return 0 if result["speedup"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
