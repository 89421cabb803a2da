"""Roofline table of every device kernel of an MD step, forward and backward.

Achieved FLOP/s and bytes/s of each kernel against the GPU's peaks:

    python -m benchmarks.roofline [--protein 1enh] [--replicas 64] [--arch schnet]
        [--configs all,all-fp16,baseline,tables+graph] [--out roofline.json]
        [--budget-s 330] [--ncu-timeout 120]
    python -m benchmarks.roofline --render roofline.json [--doc docs/kernels.md]
    python -m benchmarks.roofline --profile [--configs tables+graph] [--steps 20] [--out F]

Per configuration: times and calls per step from torch.profiler over ``--steps`` warmed-up
steps, FLOPs (CUDA-core FP32/FP16/FP64 instructions, tensor-core ops by type) and DRAM
bytes per kernel from Nsight Compute (``ncu``, run on this module's driver mode), then
arithmetic intensity, the fraction of the relevant peak and whether the roofline puts the
kernel under the memory or the compute roof. Peaks are measured on the machine (a large
device copy, large FP16 / TF32 / FP32 matmuls) next to the datasheet's. Without ncu the
table has times only and says so; configurations left when ``--budget-s`` has passed
are skipped (the JSON is rewritten after each one). ``--render`` writes the table into
the roofline section of the kernels documentation. ``--profile`` only lists every device
kernel of ``--steps`` warmed-up steps of each configuration (count and microseconds per
step, from torch.profiler) and the configuration each autotuned Triton kernel chose (JSON
with ``--out``). Needs a CUDA GPU (not ``--render``).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import re
import shlex
import sys
import time
import traceback
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import ncu as ncu_tools
from benchmarks import replace_section

DEFAULT_CONFIGS = "all,all-fp16,baseline,tables+graph"
START, END = "<!-- roofline:start -->", "<!-- roofline:end -->"
ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "kernels.md"
#: Range around the force evaluation, so the profile can tell forward kernels from others.
FORCES_RANGE = "roofline::energy_and_forces"
#: Matmul size of the ceilings and of the tensor-core calibration.
MATMUL_N = 8192
CALIBRATION_N = 2048
#: Dense datasheet peaks (FLOP/s, bytes/s) by a word of the GPU's name, most specific first.
DATASHEET = {
    "H200": {"tensor_fp16": 989e12, "tensor_tf32": 494.7e12, "fp32": 66.9e12,
             "fp64": 33.5e12, "tensor_fp64": 66.9e12, "dram": 4.8e12},
    "H100 NVL": {"tensor_fp16": 835e12, "tensor_tf32": 417.5e12, "fp32": 60e12,
                 "fp64": 30e12, "tensor_fp64": 60e12, "dram": 3.9e12},
    "H100 PCIe": {"tensor_fp16": 756e12, "tensor_tf32": 378e12, "fp32": 51.2e12,
                  "fp64": 25.6e12, "tensor_fp64": 51.2e12, "dram": 2.0e12},
    "H100": {"tensor_fp16": 989.4e12, "tensor_tf32": 494.7e12, "fp32": 66.9e12,
             "fp64": 33.5e12, "tensor_fp64": 66.9e12, "dram": 3.35e12},
    "A100": {"tensor_fp16": 312e12, "tensor_tf32": 156e12, "fp32": 19.5e12,
             "fp64": 9.7e12, "tensor_fp64": 19.5e12, "dram": 2.0e12},
}
#: Kernel-name patterns that fix a kernel's phase, checked in order.
PHASE_BY_NAME = (("backward", ("bwd", "backward", "_grad")), ("forward", ("fwd", "forward")),
                 ("integrator", ("_drift_kernel", "_finish_kernel")),
                 ("neighbours", ("_count_kernel", "_fill_kernel", "_csr_")))


# ---------------------------------------------------------------- peaks and arithmetic

def datasheet_peaks(gpu_name: str | None) -> dict[str, float]:
    """Datasheet peaks of the first `DATASHEET` entry whose key is in ``gpu_name``
    (``fp16_core`` twice ``fp32``); empty for a GPU not listed."""
    for key, peaks in DATASHEET.items():
        if gpu_name and key.lower() in gpu_name.lower():
            return {**peaks, "fp16_core": 2 * peaks["fp32"]}
    return {}


def combined_peaks(measured: dict[str, float], datasheet: dict[str, float]) -> dict[str, float]:
    """The peak of each type to compare with: measured where measured, else datasheet;
    ``fp16_core`` follows the measured ``fp32`` (twice, packed half2)."""
    peaks = {**datasheet, **{k: v for k, v in measured.items() if v}}
    if measured.get("fp32"):
        peaks["fp16_core"] = 2 * measured["fp32"]
    return peaks


def compute_peak(flops: dict[str, float], peaks: dict[str, float]) -> float | None:
    """The FLOP/s roof of a kernel doing ``flops`` of several types: the total over the
    time each type would take at its own peak (the harmonic mix); None without FLOPs or
    without a peak for one of the types."""
    total = sum(flops.values())
    if total <= 0:
        return None
    if any(v > 0 and not peaks.get(kind) for kind, v in flops.items()):
        return None
    return total / sum(v / peaks[kind] for kind, v in flops.items() if v > 0)


def roofline_point(time_s: float, flops: dict[str, float] | None, dram_bytes: float | None,
                   peaks: dict[str, float]) -> dict:
    """Achieved rates, intensity, fractions of the peaks and the bounding roof of one
    kernel's work per step.

    Returns ``flop_per_s``, ``bytes_per_s``, ``intensity`` (FLOP per DRAM byte),
    ``compute_peak``, ``frac_compute``, ``frac_dram``, ``ridge`` (the intensity where the
    roofs meet) and ``bound`` (``"memory"``, ``"compute"`` or None when unknown); values
    that cannot be computed are None.
    """
    total = sum(flops.values()) if flops is not None else None
    flop_rate = total / time_s if total is not None and time_s > 0 else None
    byte_rate = dram_bytes / time_s if dram_bytes is not None and time_s > 0 else None
    intensity = total / dram_bytes if total is not None and dram_bytes else None
    roof = compute_peak(flops, peaks) if flops else None
    dram = peaks.get("dram")
    ridge = roof / dram if roof and dram else None
    if total == 0 and dram_bytes:
        bound = "memory"
    elif intensity is not None and ridge is not None:
        bound = "memory" if intensity < ridge else "compute"
    else:
        bound = None
    return {"flop_per_s": flop_rate, "bytes_per_s": byte_rate, "intensity": intensity,
            "compute_peak": roof, "ridge": ridge, "bound": bound,
            "frac_compute": flop_rate / roof if flop_rate is not None and roof else None,
            "frac_dram": byte_rate / dram if byte_rate is not None and dram else None}


def phase_by_name(name: str) -> str | None:
    """The phase a kernel's name gives away (`PHASE_BY_NAME`), else None."""
    lowered = name.lower()
    for phase, words in PHASE_BY_NAME:
        if any(word in lowered for word in words):
            return phase
    return None


def phase_by_ancestry(ancestors: list[str]) -> str:
    """Phase of a kernel from the names of the host ops above its launch: ``backward``
    under the autograd engine, ``forward`` inside `FORCES_RANGE`, else ``other``."""
    if any(a.startswith("autograd::engine::evaluate_function") for a in ancestors):
        return "backward"
    return "forward" if FORCES_RANGE in ancestors else "other"


def merge_rows(profiled: list[tuple[str, float, float]], phases: dict[str, str],
               counts: dict[str, ncu_tools.KernelCounts] | None,
               ncu_steps: int, peaks: dict[str, float]) -> list[dict]:
    """One row per kernel: torch.profiler's calls and time per step with ncu's counters
    per step (``ncu_steps`` profiled), matched by name, else by `short_name` where that
    names one kernel on each side; a kernel only ncu saw keeps ncu's time
    (``time_source`` says which)."""
    counts = dict(counts or {})
    by_short: dict[str, list[str]] = {}
    for name in counts:
        by_short.setdefault(short_name(name), []).append(name)
    profiled_short = [short_name(name) for name, _, _ in profiled]
    rows = []
    for (name, calls, time_us), short in zip(profiled, profiled_short, strict=True):
        match = name if name in counts else None
        if match is None and len(by_short.get(short, ())) == 1 \
                and profiled_short.count(short) == 1:
            match = by_short[short][0]
        kernel = counts.pop(match) if match in counts else None
        rows.append(_row(name, calls, time_us, "torch.profiler", phases, kernel, ncu_steps,
                         peaks))
    for name, kernel in counts.items():
        rows.append(_row(name, kernel.launches / ncu_steps, kernel.time_ns / 1e3 / ncu_steps,
                         "ncu", phases, kernel, ncu_steps, peaks))
    rows.sort(key=lambda row: -row["time_us"])
    return rows


def _row(name: str, calls: float, time_us: float, source: str, phases: dict[str, str],
         kernel: ncu_tools.KernelCounts | None, ncu_steps: int, peaks: dict[str, float]) -> dict:
    """A table row (see `merge_rows`)."""
    flops = {k: v / ncu_steps for k, v in kernel.flops.items()} if kernel else None
    dram = kernel.dram_bytes / ncu_steps if kernel else None
    row = {"name": name, "phase": phase_by_name(name) or phases.get(name, "?"),
           "calls_per_step": calls, "time_us": time_us, "time_source": source,
           "ncu_time_us": kernel.time_ns / 1e3 / ncu_steps if kernel else None,
           "flops": sum(flops.values()) if flops is not None else None,
           "flops_by_type": flops, "dram_bytes": dram,
           "l2_bytes": kernel.l2_bytes / ncu_steps if kernel and kernel.l2_bytes else None,
           "registers": kernel.registers if kernel else None}
    row["flop_type"] = dominant_type(flops, peaks)
    row.update(roofline_point(time_us * 1e-6, flops, dram, peaks))
    return row


def dominant_type(flops: dict[str, float] | None, peaks: dict[str, float]) -> str | None:
    """The FLOP type that would take longest at its peak (the roof that matters most);
    None without FLOPs."""
    timed = {kind: v / peaks.get(kind, float("inf")) if peaks.get(kind) else v
             for kind, v in (flops or {}).items() if v > 0}
    return max(timed, key=timed.get) if timed else None


def short_name(name: str, width: int = 72) -> str:
    """A kernel name for a table: no ``void``, parameter list or ATen namespaces, cut in
    the middle to ``width`` characters."""
    name = name.removeprefix("void ")
    name = re.sub(r"\(anonymous namespace\)::|\b(at|native|detail|c10|cuda)::", "",
                  name[:_parameter_list(name)])
    if len(name) > width:
        half = (width - 3) // 2
        name = f"{name[:half]}...{name[-(width - 3 - half):]}"
    return name.replace("|", "/")


def _parameter_list(name: str) -> int:
    """Index of the ``(`` that opens a name's trailing parameter list, else its length."""
    depth = 0
    for i in range(len(name) - 1, -1, -1) if name.endswith(")") else ():
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return i
    return len(name)


def phase_totals(rows: list[dict]) -> dict[str, float]:
    """Microseconds per step of each phase."""
    totals: dict[str, float] = {}
    for row in rows:
        totals[row["phase"]] = totals.get(row["phase"], 0.0) + row["time_us"]
    return totals


# ---------------------------------------------------------------- markdown and docs

def _fmt(value, scale: float = 1.0, digits: int = 1, percent: bool = False) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.{digits}f} %" if percent else f"{value / scale:,.{digits}f}"


def markdown(result: dict, top: int = 12) -> str:
    """Markdown of a result: GPU, command, peaks, then per configuration its ``top``
    slowest kernels (`short_name`) and its totals."""
    peaks, env = result["peaks"], result["environment"]
    lines = [f"GPU: {env.get('gpu')} · torch {env.get('torch')} · triton {env.get('triton')} · "
             f"{env.get('date')}",
             "", f"Command: `{result['command']}`", "",
             "| peak | measured | datasheet | used |", "|---|---|---|---|"]
    for kind in sorted(set(peaks["used"])):
        unit = 1e9 if kind == "dram" else 1e12
        name = "DRAM GB/s" if kind == "dram" else f"{kind} TFLOP/s"
        lines.append(f"| {name} | {_fmt(peaks['measured'].get(kind), unit)} | "
                     f"{_fmt(peaks['datasheet'].get(kind), unit)} | "
                     f"{_fmt(peaks['used'].get(kind), unit)} |")
    for config in result["configs"]:
        timed = [row for row in config["rows"] if row["time_source"] == "torch.profiler"]
        phases = ", ".join(f"{phase} {us:,.0f} µs"
                           for phase, us in sorted(phase_totals(timed).items()))
        only_ncu = config.get("ncu_only_kernels")
        lines += ["", f"**{config['config']}** ({result['protein']} × {result['replicas']}): "
                  f"{config['total_us']:,.0f} µs of kernels per step, "
                  f"{config['kernels_per_step']:.0f} kernels; FLOPs and bytes: "
                  f"{config['counters']}"
                  + (f"; {only_ncu} kernel(s) seen by ncu only" if only_ncu else ""),
                  f"By phase: {phases}.", "",
                  "| kernel | phase | calls | µs/step | GFLOP | DRAM MB | TFLOP/s | GB/s | "
                  "FLOP/B | % FLOP peak | % DRAM peak | bound |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in config["rows"][:top]:
            bound = f"{row['bound']} ({row['flop_type']})" if row.get("flop_type") else \
                row["bound"]
            lines.append(
                f"| `{short_name(row['name'])}` | {row['phase']} | {row['calls_per_step']:.1f} | "
                f"{row['time_us']:,.1f} | {_fmt(row['flops'], 1e9, 2)} | "
                f"{_fmt(row['dram_bytes'], 1e6)} | {_fmt(row['flop_per_s'], 1e12, 2)} | "
                f"{_fmt(row['bytes_per_s'], 1e9, 0)} | {_fmt(row['intensity'], 1, 1)} | "
                f"{_fmt(row['frac_compute'], percent=True)} | "
                f"{_fmt(row['frac_dram'], percent=True)} | {bound or '–'} |")
    return "\n".join(lines)


def read_result(path: str | Path) -> dict:
    """A saved result: the ``--out`` JSON, or the same gzipped (``.json.gz``: how results
    are kept in the repository, a tenth of the size)."""
    path = Path(path)
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(data)


def render(result: dict, doc: str) -> str:
    """``doc`` with the text between `START` and `END` replaced by the result's table.

    Raises
    ------
    ValueError
        ``doc`` lacks either marker, or has them out of order.
    """
    return replace_section(doc, START, END, markdown(result, top=15), "roofline")


# ---------------------------------------------------------------- on the GPU

def environment() -> dict:
    """GPU, versions, date and host of this run."""
    import platform

    import torch
    import triton

    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "triton": triton.__version__, "host": platform.node(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _best_seconds(fn, repeats: int = 10) -> float:
    """Fastest of ``repeats`` timed calls of ``fn`` (after two warm-up calls), by CUDA
    events."""
    import torch

    for _ in range(2):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) / 1e3)
    return best


def measure_ceilings(n: int = MATMUL_N, copy_bytes: int = 2 << 30) -> dict[str, float]:
    """Peaks measured here: DRAM bytes/s of a device copy of ``copy_bytes`` (read plus
    write), FLOP/s of ``n``³ matmuls in FP16 and BF16 (``tensor_fp16``, the better),
    TF32 (``tensor_tf32``) and strict FP32 on the CUDA cores (``fp32``)."""
    import torch

    source = torch.empty(copy_bytes // 4, device="cuda")
    target = torch.empty_like(source)
    copy = _best_seconds(lambda s=source, t=target: t.copy_(s))
    peaks = {"dram": 2 * copy_bytes / copy}
    del source, target
    flops = 2.0 * n**3
    rates = {}
    previous = torch.get_float32_matmul_precision()
    try:
        for label, dtype, tf32 in (("fp16", torch.float16, False), ("bf16", torch.bfloat16, False),
                                   ("tf32", torch.float32, True), ("fp32", torch.float32, False)):
            torch.set_float32_matmul_precision("high" if tf32 else "highest")
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            rates[label] = flops / _best_seconds(lambda a=a, b=b: a @ b, repeats=5)
            del a, b
    finally:
        torch.set_float32_matmul_precision(previous)
    torch.cuda.empty_cache()
    return {**peaks, "tensor_fp16": max(rates["fp16"], rates["bf16"]),
            "tensor_tf32": rates["tf32"], "fp32": rates["fp32"]}


@contextmanager
def labelled_forces(potential):
    """Run ``potential.energy_and_forces`` inside a `FORCES_RANGE` profiler range."""
    from torch.profiler import record_function

    original = potential.energy_and_forces

    def energy_and_forces(*args, **kwargs):
        with record_function(FORCES_RANGE):
            return original(*args, **kwargs)

    potential.energy_and_forces = energy_and_forces
    try:
        yield
    finally:
        del potential.energy_and_forces


def kernel_phases(prof) -> dict[str, str]:
    """Phase per kernel name from the host ops above each launch (`phase_by_ancestry`);
    a kernel launched in several phases gets them joined by '+'."""
    found: dict[str, set[str]] = {}
    for event in prof.events():
        kernels = getattr(event, "kernels", None) or []
        if not kernels:
            continue
        ancestors, parent = [], event
        while parent is not None:
            ancestors.append(parent.name)
            parent = getattr(parent, "cpu_parent", None)
        phase = phase_by_ancestry(ancestors)
        for kernel in kernels:
            found.setdefault(kernel.name, set()).add(phase)
    return {name: "+".join(sorted(phases)) for name, phases in found.items()}


def warmed_simulation(protein: str, replicas: int, kernels: str, warmup: int = 30,
                      architecture: str = "schnet"):
    """The benchmark's simulation of ``protein`` × ``replicas`` (the demo model of
    ``architecture``, 300 K, dt 4 fs) with the configuration ``kernels``, after ``warmup``
    steps (compilation, autotuning, capture)."""
    import torch

    from workbench.model.options import KernelOptions
    from workbench.runner import RunSettings, prepare_run

    settings = RunSettings(protein=protein, model="demo", replicas=replicas, steps=warmup,
                           device="cuda", options=KernelOptions.parse(kernels),
                           architecture=architecture)
    sim = prepare_run(settings).simulation
    sim.step(warmup)
    torch.cuda.synchronize()
    return sim


def device_rows(prof, steps: int) -> list[tuple[str, float, float]]:
    """``(name, count, us)`` per step of every device kernel of a profile, slowest first."""
    import torch

    rows = []
    for event in prof.key_averages():
        time_us = getattr(event, "device_time_total", 0) or 0
        if time_us and event.device_type == torch.autograd.DeviceType.CUDA:
            rows.append((event.key, event.count / steps, time_us / steps))
    rows.sort(key=lambda row: -row[2])
    return rows


def kernel_table(protein: str, replicas: int, steps: int, kernels: str,
                 architecture: str = "schnet") -> dict:
    """``{"total_us_per_step", "kernels_per_step", "rows": [(name, count, us) per step]}``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sim = warmed_simulation(protein, replicas, kernels, architecture=architecture)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sim.step(steps)
        torch.cuda.synchronize()
    rows = device_rows(prof, steps)
    return {"protein": protein, "replicas": replicas, "architecture": architecture,
            "kernels": kernels,
            "total_us_per_step": sum(r[2] for r in rows),
            "kernels_per_step": sum(r[1] for r in rows), "rows": rows}


def autotuner_choices() -> dict:
    """``{"module.kernel": {autotune key: chosen config}}`` of the Triton kernels in
    ``kernels`` that have been autotuned in this process."""
    import importlib
    import pkgutil

    from triton.runtime.autotuner import Autotuner

    import kernels

    chosen = {}
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"kernels.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, Autotuner) and obj.cache:
                chosen[f"{info.name}.{name}"] = {str(k): str(v) for k, v in obj.cache.items()}
    return chosen


def profile_only(args) -> None:
    """``--profile``: every device kernel per step of each configuration, and what the
    autotuned kernels chose (JSON to ``--out`` when given)."""
    tables = []
    for config in args.configs:
        table = kernel_table(args.protein, args.replicas, args.steps, config, args.arch)
        print(f"{args.protein} x {args.replicas} {args.arch}, {config}: "
              f"{table['total_us_per_step']:.1f} us and {table['kernels_per_step']:.0f} "
              "kernels per step")
        for name, count, time_us in table["rows"][:40]:
            print(f"{time_us:9.1f} us  x{count:5.1f}  {name[:120]}")
        tables.append(table)
    autotuned = autotuner_choices()
    for name, configs in autotuned.items():
        for key, config in configs.items():
            print(f"autotuned {name} {key}: {config}")
    if args.out:
        Path(args.out).write_text(json.dumps({"tables": tables, "autotuned": autotuned},
                                             indent=1))


def profile_config(protein: str, replicas: int, config: str, steps: int,
                   architecture: str = "schnet") -> tuple[list, dict]:
    """torch.profiler rows ``(name, calls, us)`` per step and phases of one configuration."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sim = warmed_simulation(protein, replicas, config, architecture=architecture)
    with labelled_forces(sim.potential), \
            profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        sim.step(steps)
        torch.cuda.synchronize()
    # the forces range is ours (it labels phases), not a kernel: its time is its kernels'
    rows = [row for row in device_rows(prof, steps) if row[0] != FORCES_RANGE]
    phases = kernel_phases(prof)
    del sim, prof
    gc.collect()  # captured graphs and their memory pools go with the simulation
    torch.cuda.empty_cache()
    return rows, phases


def drive(args) -> None:
    """Driver mode, run under ncu: the work between cudaProfilerStart and Stop is a
    calibration (one FP16 and one TF32 matmul of `CALIBRATION_N`³) or ``--ncu-steps``
    steps of the warmed-up simulation of ``--driver``."""
    import torch

    if args.driver == "calibrate":
        a16 = torch.randn(CALIBRATION_N, CALIBRATION_N, device="cuda", dtype=torch.float16)
        a32 = a16.float()
        torch.set_float32_matmul_precision("high")  # TF32
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        torch.mm(a16, a16)
        torch.mm(a32, a32)
    else:
        sim = warmed_simulation(args.protein, args.replicas, args.driver, args.ncu_warmup,
                                args.arch)
        torch.cuda.cudart().cudaProfilerStart()
        sim.step(args.ncu_steps)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def _driver_argv(args, target: str) -> list[str]:
    return [sys.executable, "-m", "benchmarks.roofline", "--driver", target,
            "--protein", args.protein, "--replicas", str(args.replicas), "--arch", args.arch,
            "--ncu-steps", str(args.ncu_steps), "--ncu-warmup", str(args.ncu_warmup)]


def ncu_counts(args, ncu: str, metrics: list[str], target: str, folder: Path) -> list[dict]:
    """ncu's launches of a driver run (``target``: a configuration or ``calibrate``),
    given at most ``--ncu-timeout`` seconds and not much more than the budget left."""
    report = folder / f"ncu-{target.replace('+', '_')}.ncu-rep"
    left = args.budget_s + 30 - (time.monotonic() - args.started)
    text = ncu_tools.run_ncu(ncu, metrics, _driver_argv(args, target), report,
                             max(20.0, min(args.ncu_timeout, left)), cwd=ROOT)
    return ncu_tools.parse_raw_csv(text)


def measure(args, command: str) -> dict:
    """Everything the JSON holds (see module docstring)."""
    import torch

    from workbench.model.options import KernelOptions

    if not torch.cuda.is_available():
        raise SystemExit("roofline: needs a CUDA GPU (use --render to write a saved result)")
    for config in args.configs:
        KernelOptions.parse(config)  # a misspelt configuration fails before any GPU work
    out_dir = Path(args.out).resolve().parent
    out_dir.mkdir(parents=True, exist_ok=True)
    env = environment()
    notes = []
    try:
        measured = measure_ceilings()
    except Exception as err:  # the datasheet's peaks still give a table
        traceback.print_exc()
        measured = {}
        notes.append(f"ceilings not measured ({type(err).__name__}: {err}): datasheet peaks")
    datasheet = datasheet_peaks(env["gpu"])
    peaks = combined_peaks(measured, datasheet)
    ncu = ncu_tools.find_ncu(args.ncu)
    metrics, factors = [], {}
    if ncu is None:
        notes.append("ncu not found: times only, no FLOP or byte counts")
    else:
        try:
            metrics = ncu_tools.choose_metrics(ncu_tools.query_metrics(ncu))
            factors = ncu_tools.calibration_factors(
                ncu_counts(args, ncu, metrics, "calibrate", out_dir), 2.0 * CALIBRATION_N**3)
            notes += ncu_tools.coverage_notes(metrics, factors)
        except ncu_tools.NcuError as err:
            notes.append(f"ncu unusable ({err}): times only, no FLOP or byte counts")
            ncu = None
    result = {"environment": env, "command": command, "protein": args.protein,
              "architecture": args.arch,
              "replicas": args.replicas, "steps": args.steps, "ncu_steps": args.ncu_steps,
              "ncu": ncu, "metrics": metrics, "tensor_flops_per_op": factors, "notes": notes,
              "peaks": {"measured": measured, "datasheet": datasheet, "used": peaks},
              "configs": []}
    for config in args.configs:
        print(f"roofline: {config}", file=sys.stderr, flush=True)
        if time.monotonic() - args.started > args.budget_s:
            notes.append(f"{config}: skipped, past the --budget-s of {args.budget_s:.0f} s")
            continue
        try:
            result["configs"].append(measure_config(args, config, ncu, metrics, factors, peaks,
                                                    notes))
        except Exception as err:  # one failing configuration must not lose the others
            traceback.print_exc()
            notes.append(f"{config}: failed ({type(err).__name__}: {err})")
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


def measure_config(args, config: str, ncu: str | None, metrics: list[str],
                   factors: dict[str, float], peaks: dict[str, float], notes: list[str]) -> dict:
    """The rows and totals of one configuration (ncu failures noted in ``notes``)."""
    out_dir = Path(args.out).resolve().parent
    rows, phases = profile_config(args.protein, args.replicas, config, args.steps, args.arch)
    counts, source = None, "none (ncu unavailable)"
    if ncu is not None and time.monotonic() - args.started > args.budget_s:
        source = "none (skipped past --budget-s)"
        notes.append(f"{config}: ncu skipped, past the --budget-s of {args.budget_s:.0f} s")
    elif ncu is not None:
        try:
            launches = ncu_counts(args, ncu, metrics, config, out_dir)
            counts, source = ncu_tools.per_kernel(launches, factors), "ncu"
        except ncu_tools.NcuError as err:
            source = "none (ncu failed, see notes)"
            notes.append(f"{config}: {err}")
    merged = merge_rows(rows, phases, counts, args.ncu_steps, peaks)
    timed = [r for r in merged if r["time_source"] == "torch.profiler"]
    return {"config": config, "counters": source, "rows": merged,
            "total_us": sum(r["time_us"] for r in timed),
            "kernels_per_step": sum(r["calls_per_step"] for r in timed),
            "ncu_only_kernels": len(merged) - len(timed)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protein", default="1enh")
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--arch", default="schnet",
                        help="network architecture whose demo model runs (schnet, egnn, ...)")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS,
                        help="comma-separated KernelOptions.parse names")
    parser.add_argument("--steps", type=int, default=10, help="steps under torch.profiler")
    parser.add_argument("--ncu-steps", type=int, default=1, help="steps under ncu")
    parser.add_argument("--ncu-warmup", type=int, default=10,
                        help="warm-up steps of the ncu driver")
    parser.add_argument("--ncu-timeout", type=float, default=120,
                        help="seconds before one ncu run is given up")
    parser.add_argument("--budget-s", type=float, default=330,
                        help="seconds after which configurations left are skipped (their "
                             "ncu run first), so that the table still comes out")
    parser.add_argument("--ncu", default=None, help="path of ncu (default: found)")
    parser.add_argument("--out", default=None,
                        help="JSON file of the result (default roofline.json; with --profile, "
                             "none)")
    parser.add_argument("--profile", action="store_true",
                        help="only the device kernels per step and the autotuners' choices")
    parser.add_argument("--render", metavar="JSON", default=None,
                        help="write this result (.json or .json.gz) into the roofline "
                             "section of --doc")
    parser.add_argument("--doc", default=str(DOC))
    parser.add_argument("--driver", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.started = time.monotonic()
    args.configs = [config.strip() for config in args.configs.split(",") if config.strip()]
    if args.driver:
        drive(args)
        return
    if args.profile:
        profile_only(args)
        return
    args.out = args.out or "roofline.json"
    if args.render:
        doc = Path(args.doc)
        doc.write_text(render(read_result(args.render), doc.read_text()))
        print(f"roofline section of {doc} written from {args.render}")
        return
    command = "python -m benchmarks.roofline " + shlex.join(argv if argv is not None
                                                            else sys.argv[1:])
    try:
        result = measure(args, command)
    except Exception:
        traceback.print_exc()
        raise SystemExit("roofline: failed (traceback above)") from None
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1))
    table = markdown(result)
    out.with_suffix(".md").write_text(table + "\n")
    for note in result["notes"]:
        print(f"note: {note}")
    print(f"full result: {out} (table: {out.with_suffix('.md')})\n")
    print(table)


if __name__ == "__main__":
    main()
