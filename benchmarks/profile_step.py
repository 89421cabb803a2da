"""Every device kernel of a few captured MD steps, per step: count and microseconds.

    python -m benchmarks.profile_step --protein 1enh [--replicas 64] [--steps 20]
        [--kernels tables+graph] [--out profile.json]

``--kernels`` is a benchmark configuration (e.g. ``tables+graph-fp16``).

Builds the benchmark's simulation (demo model, 300 K, dt 4 fs), runs 30 warm-up steps,
profiles ``--steps`` more with torch.profiler and prints the kernels sorted by time per
step, then the configuration each autotuned Triton kernel chose (all written as JSON with
``--out``). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from workbench.files import atomic_write_text
from workbench.model.options import KernelOptions
from workbench.runner import RunSettings, prepare_run


def warmed_simulation(protein: str, replicas: int, kernels: str, warmup: int = 30):
    """The benchmark's simulation of ``protein`` × ``replicas`` (demo model) with the
    configuration ``kernels``, after ``warmup`` steps (compilation, autotuning, capture)."""
    settings = RunSettings(protein=protein, model="demo", replicas=replicas, steps=warmup,
                           device="cuda", options=KernelOptions.parse(kernels))
    sim = prepare_run(settings).simulation
    sim.step(warmup)
    torch.cuda.synchronize()
    return sim


def device_rows(prof, steps: int) -> list[tuple[str, float, float]]:
    """``(name, count, us)`` per step of every device kernel of a profile, slowest first."""
    rows = []
    for event in prof.key_averages():
        time = getattr(event, "device_time_total", 0) or 0
        if time and event.device_type == torch.autograd.DeviceType.CUDA:
            rows.append((event.key, event.count / steps, time / steps))
    rows.sort(key=lambda row: -row[2])
    return rows


def kernel_table(protein: str, replicas: int, steps: int, kernels: str) -> dict:
    """``{"total_us_per_step", "kernels_per_step", "rows": [(name, count, us) per step]}``."""
    sim = warmed_simulation(protein, replicas, kernels)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sim.step(steps)
        torch.cuda.synchronize()
    rows = device_rows(prof, steps)
    return {"protein": protein, "replicas": replicas, "kernels": kernels,
            "total_us_per_step": sum(r[2] for r in rows),
            "kernels_per_step": sum(r[1] for r in rows), "rows": rows}


def autotuner_choices() -> dict:
    """``{"module.kernel": {autotune key: chosen config}}`` of the Triton kernels in
    ``kernels`` that have been autotuned in this process."""
    from triton.runtime.autotuner import Autotuner

    import kernels

    chosen = {}
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"kernels.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, Autotuner) and obj.cache:
                chosen[f"{info.name}.{name}"] = {str(k): str(v) for k, v in obj.cache.items()}
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protein", default="1enh")
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--kernels", default="tables+graph")
    parser.add_argument("--out", default=None, help="JSON file for the table")
    args = parser.parse_args()
    table = kernel_table(args.protein, args.replicas, args.steps, args.kernels)
    print(f"{args.protein} x {args.replicas}: {table['total_us_per_step']:.1f} us and "
          f"{table['kernels_per_step']:.0f} kernels per step")
    for name, count, time in table["rows"][:40]:
        print(f"{time:9.1f} us  x{count:5.1f}  {name[:120]}")
    table["autotuned"] = autotuner_choices()
    for name, configs in table["autotuned"].items():
        for key, config in configs.items():
            print(f"autotuned {name} {key}: {config}")
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
