"""Nsight Compute (``ncu``) as a subprocess: which counters to ask for, running a driver
under it, and reading its raw CSV page into per-kernel FLOPs by type and DRAM bytes.

Counters are chosen from what ``ncu --query-metrics`` lists on the machine, so a counter
that a version or a GPU lacks is left out rather than failing the run.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: Counters every kernel needs (duration, DRAM traffic).
BASE_METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")
#: Counters read when the machine lists them (L2 traffic, registers).
EXTRA_METRICS = ("lts__t_bytes.sum", "launch__registers_per_thread")
#: CUDA-core floating-point instruction counters: ``smsp__sass_thread_inst_executed_op_``
#: (or ``sm__``, where ncu lists no ``smsp__`` one) + precision letter + operation +
#: ``_pred_on``; an FMA counts two FLOPs.
SASS_OPS = re.compile(r"^(?:smsp|sm)__sass_thread_inst_executed_op_([fhd])(add|mul|fma)_pred_on$")
#: Tensor-core counters by source type (sparsity variants and integer types left out).
TENSOR_OPS = re.compile(r"^sm__ops_path_tensor_src_(fp16|bf16|tf32|fp64)(_dst_fp16|_dst_fp32)?$")
#: FLOP type of each CUDA-core precision letter.
SASS_TYPES = {"f": "fp32", "h": "fp16_core", "d": "fp64"}
#: FLOP type of each tensor-core source type.
TENSOR_TYPES = {"fp16": "tensor_fp16", "bf16": "tensor_fp16", "tf32": "tensor_tf32",
                "fp64": "tensor_fp64"}
#: Scale of each unit ncu may print, to bytes, nanoseconds or plain counts.
UNIT_SCALE = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
              "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}
_SI = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


class NcuError(RuntimeError):
    """ncu is missing, refused to profile, or printed nothing readable."""


@dataclass
class KernelCounts:
    """Counters of one kernel name summed over its launches.

    Attributes
    ----------
    launches : int
    time_ns : float
        ``gpu__time_duration`` summed.
    dram_bytes : float
        DRAM bytes read plus written.
    l2_bytes : float or None
    registers : float or None
        Registers per thread (the largest over the launches).
    flops : dict
        FLOPs per type (``fp32``, ``fp16_core``, ``fp64``, ``tensor_fp16``,
        ``tensor_tf32``, ``tensor_fp64``).
    """

    launches: int = 0
    time_ns: float = 0.0
    dram_bytes: float = 0.0
    l2_bytes: float | None = None
    registers: float | None = None
    flops: dict = field(default_factory=dict)


def find_ncu(given: str | None = None) -> str | None:
    """Path of the ncu executable: ``given``, else on PATH, else the usual CUDA and
    Nsight Compute install folders; None when none is found."""
    if given:
        return given if Path(given).exists() or shutil.which(given) else None
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/local/cuda*/bin/ncu")
                        + glob.glob("/opt/nvidia/nsight-compute/*/ncu"))
    return candidates[-1] if candidates else None


def listed_metrics(text: str) -> set[str]:
    """Base metric names in the output of ``ncu --query-metrics`` (first word of each
    line that looks like ``unit__counter``)."""
    names = set()
    for line in text.splitlines():
        word = line.split(maxsplit=1)[0] if line.strip() else ""
        if re.fullmatch(r"[a-z0-9]+__[a-z0-9_]+", word):
            names.add(word)
    return names


def choose_metrics(available: set[str]) -> list[str]:
    """The counters to collect: `BASE_METRICS`, the listed `EXTRA_METRICS`, and every
    listed FLOP counter (`SASS_OPS`, `TENSOR_OPS`), each as its ``.sum``."""
    chosen = list(BASE_METRICS)
    chosen += [m for m in EXTRA_METRICS if m.split(".")[0] in available]
    flops = sorted(m for m in available if TENSOR_OPS.match(m) or (
        SASS_OPS.match(m) and not (m.startswith("sm__") and "smsp" + m[2:] in available)))
    return chosen + [m + ".sum" for m in flops]


def _number(text: str) -> float | None:
    """A CSV cell as a float (thousands separators removed); None when empty or 'n/a'."""
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def _scale(unit: str) -> float:
    """Factor from ``unit`` to bytes, nanoseconds or counts (``Kbyte`` 1e3, ``inst`` 1)."""
    unit = unit.strip().lower()
    if unit in UNIT_SCALE:
        return UNIT_SCALE[unit]
    if len(unit) > 1 and unit[0] in _SI and unit[1:] in ("inst", "op", ""):
        return _SI[unit[0]]
    return 1.0


def parse_raw_csv(text: str) -> list[dict]:
    """Launches of ncu's ``--csv --page raw`` output: ``{"name", metric: value}`` each.

    Lines before the header (``"ID",...``) are skipped; the row after the header is the
    units row and scales every value to base units (bytes, ns, counts).

    Raises
    ------
    NcuError
        No header, or no ``Kernel Name`` column.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise NcuError("no CSV header (a line starting with \"ID\") in ncu's output")
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    if "Kernel Name" not in header:
        raise NcuError(f"ncu's CSV has no 'Kernel Name' column: {header[:12]}")
    name_col = header.index("Kernel Name")
    metric_cols = [i for i, h in enumerate(header) if "__" in h]
    units = next(reader, [])
    launches = []
    for row in reader:
        if len(row) != len(header):
            continue
        launch = {"name": row[name_col]}
        for i in metric_cols:
            value = _number(row[i])
            if value is not None:
                launch[header[i]] = value * _scale(units[i] if i < len(units) else "")
        launches.append(launch)
    return launches


def launch_flops(launch: dict, tensor_flops_per_op: dict[str, float]) -> dict[str, float]:
    """FLOPs of one launch per type: CUDA-core FMAs count two, tensor-core ops
    ``tensor_flops_per_op[type]`` each (calibrated, see `calibration_factors`)."""
    flops: dict[str, float] = {}
    for metric, value in launch.items():
        base = metric.removesuffix(".sum")
        if sass := SASS_OPS.match(base):
            kind = SASS_TYPES[sass.group(1)]
            flops[kind] = flops.get(kind, 0.0) + value * (2 if sass.group(2) == "fma" else 1)
        elif tensor := TENSOR_OPS.match(base):
            kind = TENSOR_TYPES[tensor.group(1)]
            flops[kind] = flops.get(kind, 0.0) + value * tensor_flops_per_op.get(kind, 1.0)
    return flops


def per_kernel(launches: list[dict], tensor_flops_per_op: dict[str, float]
               ) -> dict[str, KernelCounts]:
    """`KernelCounts` per kernel name, launches summed."""
    kernels: dict[str, KernelCounts] = {}
    for launch in launches:
        counts = kernels.setdefault(launch["name"], KernelCounts())
        counts.launches += 1
        counts.time_ns += launch.get("gpu__time_duration.sum", 0.0)
        counts.dram_bytes += (launch.get("dram__bytes_read.sum", 0.0)
                              + launch.get("dram__bytes_write.sum", 0.0))
        if "lts__t_bytes.sum" in launch:
            counts.l2_bytes = (counts.l2_bytes or 0.0) + launch["lts__t_bytes.sum"]
        if "launch__registers_per_thread" in launch:
            counts.registers = max(counts.registers or 0.0,
                                   launch["launch__registers_per_thread"])
        for kind, value in launch_flops(launch, tensor_flops_per_op).items():
            counts.flops[kind] = counts.flops.get(kind, 0.0) + value
    return kernels


def calibration_factors(launches: list[dict], flops_per_matmul: float) -> dict[str, float]:
    """FLOPs per tensor-core op, from launches of one FP16 and one TF32 matmul of
    ``flops_per_matmul`` FLOPs each: the kernels with FP16/BF16 ops sum to the first,
    those with TF32 ops to the second. A type with no ops is left out."""
    ops = {"tensor_fp16": 0.0, "tensor_tf32": 0.0}
    for launch in launches:
        for kind, value in launch_flops(launch, {}).items():
            if kind in ops:
                ops[kind] += value
    return {kind: flops_per_matmul / total for kind, total in ops.items() if total > 0}


def run_ncu(ncu: str, metrics: list[str], driver: list[str], report: Path,
            timeout_s: float, cwd: Path | None = None) -> str:
    """Profile ``driver`` (argv, run in ``cwd``) between its cudaProfilerStart/Stop with
    ``metrics``, keep the report at ``report`` (``.ncu-rep``) and return its raw CSV page.

    Clocks and caches are left as the program has them (``--clock-control none``,
    ``--cache-control none``), as in a run. A failing profile that still wrote its report
    (some kernel could not be profiled) is read, with a warning on stderr.

    Raises
    ------
    NcuError
        ncu failed without a report (its message included), timed out, or profiled nothing.
    """
    command = [ncu, "--profile-from-start", "off", "--clock-control", "none",
               "--cache-control", "none", "--metrics", ",".join(metrics),
               "--export", str(report), "--force-overwrite", *driver]
    report.unlink(missing_ok=True)
    try:
        _checked(command, timeout_s, cwd)
    except NcuError as err:
        if not report.exists() or "timed out" in str(err):
            raise
        print(f"warning: {err}; reading the report it wrote", file=sys.stderr)
    table = [ncu, "--import", str(report), "--csv", "--page", "raw"]
    try:
        return _checked([*table, "--print-units", "base"], timeout_s)
    except NcuError:  # an ncu without --print-units: its scaled units are read instead
        return _checked(table, timeout_s)


def query_metrics(ncu: str, timeout_s: float = 60) -> set[str]:
    """Base names of the metrics ncu lists for this machine's GPU."""
    return listed_metrics(_checked([ncu, "--query-metrics"], timeout_s))


def _checked(command: list[str], timeout_s: float, cwd: Path | None = None) -> str:
    """stdout of ``command``; NcuError with the tail of its output if it fails. On a
    timeout the whole process group (ncu and the program it profiles) is killed."""
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=cwd, start_new_session=True)
    except OSError as err:
        raise NcuError(f"cannot run {command[0]}: {err}") from err
    try:
        out, err_text = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise NcuError(f"ncu timed out after {timeout_s:.0f} s: {' '.join(command[:6])} ...") \
            from err
    refused = "ERR_NVGPUCTRPERM" in out + err_text
    if proc.returncode != 0 or refused:
        tail = (out + err_text).strip()[-1500:]
        hint = " (no permission for GPU performance counters)" if refused else ""
        raise NcuError(f"ncu exited {proc.returncode}{hint}: {tail}")
    return out


def coverage_notes(metrics: list[str], factors: dict[str, float]) -> list[str]:
    """What the FLOP counts miss: no tensor-core or CUDA-core counter among ``metrics``,
    or a tensor-core type whose FLOPs per op the calibration could not fix (taken as 1)."""
    notes = []
    if not any(TENSOR_OPS.match(m.removesuffix(".sum")) for m in metrics):
        notes.append("ncu lists no tensor-core op counter: tensor-core FLOPs are missing")
    if not any(SASS_OPS.match(m.removesuffix(".sum")) for m in metrics):
        notes.append("ncu lists no FP instruction counter: CUDA-core FLOPs are missing")
    for kind in ("tensor_fp16", "tensor_tf32"):
        if kind not in factors:
            notes.append(f"{kind}: not calibrated, one FLOP per counted op assumed")
    return notes
