"""Aggregate throughput of a sharded run on N GPUs against 1 GPU, measured in one go.

Weak scaling: each GPU gets the same number of replicas, so N GPUs run N times
the ensemble. Each configuration is a fresh :func:`launch_sharded` run; its
throughput is total replica-steps over rank 0's wall time with metrics gathered
at every report interval, the first interval (compilation, allocator growth)
excluded. A configuration that fails or times out is recorded with its error and
the others still run.

    python -m workbench.distributed.scaling --protein 1enh --replicas-per-gpu 64 --steps 200 \\
        --out artifacts/multi_gpu/results.json

writes the result as JSON. Each configuration is limited by --timeout (default 80 s); the
defaults finish in well under 3 minutes on two H200s. Exit code 1 if a configuration
failed (its error is in the JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

from workbench.benchmark import environment
from workbench.distributed.launcher import ShardedRunError, ShardedSettings, launch_sharded
from workbench.files import atomic_write_text
from workbench.model.options import KernelOptions
from workbench.runner import RunSettings
from workbench.units import ns_per_day


def measure(settings: RunSettings, ranks: int, timeout_s: float) -> dict:
    """One configuration: ``settings`` (the whole ensemble) over ``ranks`` processes.

    Returns
    -------
    dict
        ``ranks``, ``replicas``, ``backend``, ``timestep_mol_per_s``, ``ns_per_day``,
        ``rank_timestep_mol_per_s``, ``wall_s``, ``frozen_replicas``; or ``ranks``,
        ``replicas`` and ``error`` when the run failed.
    """
    record = {"ranks": ranks, "replicas": settings.replicas}
    try:
        result = launch_sharded(ShardedSettings(settings, ranks=ranks, timeout_s=timeout_s))
    except (ShardedRunError, ValueError) as exc:
        return {**record, "error": str(exc)}
    last = result.reports[-1].summary() if result.reports else {"frozen_replicas": []}
    return {
        **record,
        "backend": result.backend,
        "timestep_mol_per_s": result.timestep_mol_per_s,
        "ns_per_day": ns_per_day(result.timestep_mol_per_s, settings.timestep_fs),
        "rank_timestep_mol_per_s": result.rank_timestep_mol_per_s,
        "wall_s": result.wall_s,
        "frozen_replicas": last["frozen_replicas"],
    }


def scaling(settings: RunSettings, gpus: int, replicas_per_gpu: int, timeout_s: float) -> dict:
    """1 GPU, then ``gpus`` GPUs, each with ``replicas_per_gpu`` replicas per GPU.

    Returns
    -------
    dict
        ``records`` (one per configuration, see :func:`measure`), and ``speedup``
        (aggregate throughput on ``gpus`` over that on 1) and ``efficiency``
        (speedup / gpus), None where a configuration failed.
    """
    records = [
        measure(replace(settings, replicas=replicas_per_gpu * n), n, timeout_s)
        for n in sorted({1, gpus})
    ]
    one, many = records[0], records[-1]
    speedup = None
    if "error" not in one and "error" not in many and one["timestep_mol_per_s"] > 0:
        speedup = many["timestep_mol_per_s"] / one["timestep_mol_per_s"]
    return {
        "records": records,
        "speedup": speedup,
        "efficiency": None if speedup is None else speedup / gpus,
    }


def write_scaling(result: dict, settings: RunSettings, out: str | Path, command: str) -> Path:
    """Write the scaling result with its settings and environment as JSON (atomically)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "environment": environment(),
        "command": command,
        "settings": {
            "protein": settings.protein,
            "steps": settings.steps,
            "report_interval": settings.save_interval,
            "timestep_fs": settings.timestep_fs,
            "kernels": settings.options.to_dict(),
        },
        **result,
    }
    atomic_write_text(out, json.dumps(payload, indent=2))
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m workbench.distributed.scaling``: see ``--help``."""
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
    command = " ".join(["python -m workbench.distributed.scaling", *given])
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
