"""Render BENCHMARKS.md from the benchmark runs in ``benchmarks/results/``.

One file per machine (``h100.json``, ``h200.json``, ``cpu.json``) holds its runs in the
order they were added: ``{"runs": [{"name", "environment", "command", "records"}, ...]}``,
each run the ``bench.json`` that ``workbench bench --out FOLDER`` writes, with a name that
says what it measured (a run stopped part-way keeps its ``unfinished`` count of cases not
run, and its line under Runs says so). A new measurement replaces an old one: for every GPU, network
architecture (a record without one is SchNet) with the backend asked for (a
tensor-product network's ``tp_backend_requested``, a Deep Potential's
``dp_backend_requested``; `workbench.benchmark.requested_backend`), configuration,
model, protein and replica count the latest record is kept (by the run's
``environment.date``; on the same date the run added later, and within a run the later
record). Run from the repository root::

    python -m benchmarks.report            # or: make benchmarks-md
    python -m benchmarks.report --add artifacts/bench/bench.json --name five-proteins

``--add`` appends a ``bench.json`` as a run to the file of its machine
(``benchmarks/results/<gpu>.json``; the name defaults to the bench folder's name) and
refuses a run already there or a name already taken; then render the page again.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from workbench.benchmark import network_label, requested_backend

HERE = Path(__file__).resolve().parent
PROTEINS = ["cln025", "2jof", "1yrf", "1enh", "2a3d"]  # by size: 49 to 360 beads


@dataclass(frozen=True)
class Target:
    """A throughput or memory goal, checked against the latest records.

    ``config`` None means the fastest FP32 configuration measured other than ``baseline``.
    ``bound`` maps a GPU (``"H100"``) to the goal; a GPU without one is not judged.
    ``check``: ``"at_least"`` timestep·mol/s, ``"at_most"`` peak GB, or ``"runs"`` (any
    record at all; ``bound`` only names the GPUs).
    """

    goal: str
    protein: str
    replicas: int
    bound: dict[str, float] = field(default_factory=dict)
    config: str | None = None
    check: str = "at_least"


TARGETS = [
    Target("1ENH × 64, reference path", "1enh", 64, {"H200": 2300, "H100": 1725}, "baseline"),
    Target("1ENH × 64, fastest path", "1enh", 64, {"H200": 48000, "H100": 36000}),
    Target("1ENH × 64, fastest path, peak GB", "1enh", 64, {"H200": 1.5, "H100": 1.5},
           check="at_most"),
    Target("CLN025 × 64, fastest path", "cln025", 64, {"H200": 150000, "H100": 112500}),
    Target("2A3D × 64, fastest path", "2a3d", 64, {"H200": 9000}),
    Target("1ENH × 16,384 replicas on one GPU", "1enh", 16384, {"H200": 0, "H100": 0},
           check="runs"),
    Target("CLN025 × 8 on two CPU cores", "cln025", 8, {"CPU": 500}),
    # one system of 100,068 beads (docs/large-systems.md)
    Target("1ENH × 372 copies in one system on one GPU", "1enh*372", 1, {"H200": 0, "H100": 0},
           check="runs"),
    # the exact network (no tables) with every fused technique on
    Target("1ENH × 64, all on, FP16, exact network", "1enh", 64,
           {"H200": 20000, "H100": 15000}, "all+graph-fp16"),
    Target("1ENH × 64, all on, FP32 (TF32), exact network", "1enh", 64,
           {"H200": 10000, "H100": 7500}, "all+graph"),
    Target("2A3D × 64, all on, FP16, exact network", "2a3d", 64,
           {"H200": 14000, "H100": 10500}, "all+graph-fp16"),
]

#: Goals measured by other tools than ``workbench bench`` (figure, how, GPU).
OTHER_TARGETS = [
    ("fused runs bitwise identical (CSR on)", "yes",
     "`workbench.determinism.runs_are_bitwise_identical`, 1ENH × 16, 50 steps, H200"),
    ("tables vs exact filters: Q-histogram intersection ≥ 0.95", "0.970",
     "shipped CLN025 model, 64 replicas, 10,000 steps, 0.01 Å tables, H100"),
    ("two GPUs ≥ 1.8× one GPU (1ENH, 64 replicas per GPU)", "1.99×", "two H200"),
]


def gpu_name(device: str | None) -> str:
    """Short GPU name: ``"NVIDIA H100 80GB HBM3"`` → ``"H100"``; None → ``"CPU"``."""
    if not device:
        return "CPU"
    words = device.removeprefix("NVIDIA ").split()
    return words[0] if words else device


def machine_file(environment: dict) -> str:
    """The results file of a run's machine: ``h100.json``, ``h200.json``, ``cpu.json``."""
    return f"{gpu_name(environment.get('gpu')).lower()}.json"


def read_runs(path: str | Path) -> list[dict]:
    """The runs of a results file (a lone ``bench.json`` is one run)."""
    payload = json.loads(Path(path).read_text())
    return payload.get("runs", [payload])


def load_records(folder: str | Path) -> list[dict]:
    """Every record of every run of every ``*.json`` file in ``folder``, with ``gpu``,
    ``date``, ``command``, ``name``, ``source`` (file name) and ``run`` (position in the
    file, from 1) of its run and ``order`` (position in the run)."""
    records = []
    for path in sorted(Path(folder).glob("*.json")):
        for run, payload in enumerate(read_runs(path), start=1):
            env = payload["environment"]
            for order, record in enumerate(payload["records"]):
                records.append({**record, "model": record.get("model", "demo"),
                                "architecture": record.get("architecture", "schnet"),
                                "gpu": gpu_name(env.get("gpu")), "date": env["date"],
                                "command": payload["command"],
                                "name": payload.get("name", path.stem), "source": path.name,
                                "run": run, "order": order,
                                "unfinished": payload.get("unfinished", 0)})
    return records


def _rank(record: dict) -> tuple:
    return record["date"], record["source"], record["run"], record["order"]


def latest(records: list[dict]) -> list[dict]:
    """The newest record per GPU, architecture and backend, configuration, model, protein and
    replica count."""
    kept: dict[tuple, dict] = {}
    for record in records:
        key = (record["gpu"], record["architecture"], requested_backend(record),
               record["label"], record["model"], record["protein"], record["replicas"])
        if key not in kept or _rank(record) >= _rank(kept[key]):
            kept[key] = record
    size = {protein: i for i, protein in enumerate(PROTEINS)}
    return sorted(kept.values(), key=lambda r: (r["gpu"], size.get(r["protein"], 99),
                                                r["protein"], r["replicas"], r["model"],
                                                str(r["architecture"]),
                                str(requested_backend(r)),
                                -r["timestep_mol_per_s"]))


def add_run(bench_json: str | Path, folder: str | Path, name: str | None = None) -> Path:
    """Append the run of ``bench_json`` to its machine's file in ``folder``; returns the
    file. Refuses (ValueError) a run already in the file or a name already taken."""
    bench_json = Path(bench_json)
    payload = json.loads(bench_json.read_text())
    if "runs" in payload or not {"environment", "command", "records"} <= payload.keys():
        raise ValueError(f"{bench_json} is not the bench.json of one `workbench bench` run")
    name = name or bench_json.resolve().parent.name
    path = Path(folder) / machine_file(payload["environment"])
    runs = read_runs(path) if path.exists() else []
    fields = ("environment", "command", "records")
    for run in runs:
        if all(run.get(key) == payload[key] for key in fields):
            raise ValueError(f"{bench_json} is already in {path} (run {run.get('name')!r})")
        if run.get("name") == name:
            raise ValueError(f"{path} already has a run named {name!r}; give another --name")
    unfinished = {"unfinished": payload["unfinished"]} if payload.get("unfinished") else {}
    runs.append({"name": name, **{key: payload[key] for key in fields}, **unfinished})
    path.write_text(runs_text(runs))
    return path


def runs_text(runs: list[dict]) -> str:
    """A results file's JSON text: ``{"runs": [...]}`` with each run's fields but its records
    on one line and each record on a line of its own (compact, and a diff shows the runs
    and records that changed)."""

    def run_text(run: dict) -> str:
        head = json.dumps({k: v for k, v in run.items() if k != "records"}, ensure_ascii=False)
        records = ",\n".join(json.dumps(r, ensure_ascii=False) for r in run.get("records", []))
        return f'{head[:-1]}, "records": [\n{records}]}}'

    return '{"runs": [\n' + ",\n".join(run_text(run) for run in runs) + "]}\n"


def target_figure(target: Target, gpu: str, records: list[dict]) -> dict | None:
    """The record that answers ``target`` on ``gpu`` (the fastest one it allows), or None;
    the targets are the SchNet demo model's."""
    candidates = [
        r for r in records
        if r["gpu"] == gpu and r["protein"] == target.protein and r["replicas"] == target.replicas
        and r["model"] == "demo" and r["architecture"] == "schnet"
        and (r["label"] == target.config if target.config else
             r["label"] != "baseline" and r["options"].get("mlp_precision", "fp32") == "fp32")
    ]
    return max(candidates, key=lambda r: r["timestep_mol_per_s"], default=None)


def _target_rows(records: list[dict], gpus: list[str]) -> list[str]:
    rows = []
    for target in TARGETS:
        for gpu in gpus:
            bound = target.bound.get(gpu)
            record = target_figure(target, gpu, records)
            if bound is None or record is None:
                continue
            rate, peak = record["timestep_mol_per_s"], record["peak_memory_gb"]
            if target.check == "at_most":
                goal, shown, met = f"≤ {bound:g} GB", f"{peak:.2f} GB", peak <= bound
            elif target.check == "runs":
                goal, shown, met = "runs", f"{rate:,.0f}", True
            else:
                goal, shown, met = f"≥ {bound:,.0f}", f"{rate:,.0f}", rate >= bound
            rows.append(f"| {target.goal} | {gpu} | {goal} | {shown} (`{record['label']}`, "
                        f"{record['date']}) | {'met' if met else '**not met**'} |")
    return rows


def render(records: list[dict]) -> str:
    """BENCHMARKS.md from all records (the latest of each kind is shown)."""
    shown = latest(records)
    gpus = sorted({r["gpu"] for r in shown})
    sources = sorted({(r["source"], r["run"], r["name"], r["command"], r["unfinished"])
                      for r in shown})
    ref = {source[:2]: i + 1 for i, source in enumerate(sources)}
    lines = [
        "<!-- generated by `python benchmarks/report.py` (make benchmarks-md) from "
        "benchmarks/results/*.json; do not edit -->",
        "",
        "# Benchmarks",
        "",
        "Throughput in timestep·mol/s: MD steps × replicas per wall second of whole steps "
        "(neighbour list, forces, integrator), median of timed windows after a warm-up; "
        "Langevin at 300 K, 4-fs steps, default CGSchNet sizes (hidden 128, filters 128, "
        "3 blocks, 50 RBF, cutoff 10 Å) unless the network column names another architecture "
        "(its default sizes), the untrained demo model unless the model column "
        "says otherwise. Peak GB is `torch.cuda.max_memory_allocated` over the timed "
        "windows. The full protocol, and how to add a result, is in "
        "[docs/benchmark-protocol.md](docs/benchmark-protocol.md).",
        "",
        "## Targets",
        "",
        "| goal | GPU | target | latest figure | status |",
        "|---|---|---|---|---|",
        *_target_rows(shown, gpus),
        "",
        "| goal (measured outside `workbench bench`) | figure | how |",
        "|---|---|---|",
        *(f"| {goal} | {figure} | {how} |" for goal, figure, how in OTHER_TARGETS),
        "",
    ]
    for gpu in gpus:
        lines += [f"## {gpu}", "",
                  "| protein | beads | replicas | network | config | model | timestep·mol/s | "
                  "ns/day | peak GB | edges/replica | date | run |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in shown if r["gpu"] == gpu):
            peak = "–" if r.get("peak_memory_gb") is None else f"{r['peak_memory_gb']:.2f}"
            edges = r.get("edges_per_replica")
            lines.append(
                f"| {r['protein']} | {r['beads']:,} | {r['replicas']:,} | "
                f"{network_label(r)} | `{r['label']}` | "
                f"{r['model']} | {r['timestep_mol_per_s']:,.0f} | {r['ns_per_day']:,.0f} | "
                f"{peak} | {'–' if edges is None else f'{edges:,.0f}'} | {r['date']} | "
                f"[{ref[r['source'], r['run']]}] |")
        lines.append("")
    lines += ["## Runs", ""]
    lines += [f"{ref[source, run]}. `{source}` run {run}, {name}: `{command}`"
              + (f" (stopped with {unfinished} case(s) not run)" if unfinished else "")
              for source, run, name, command, unfinished in sources]
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(HERE / "results"))
    parser.add_argument("--out", default=str(HERE.parent / "BENCHMARKS.md"))
    parser.add_argument("--add", metavar="BENCH_JSON",
                        help="append this bench.json as a run to its machine's results file")
    parser.add_argument("--name", help="the added run's name (default: its folder's name)")
    args = parser.parse_args(argv)
    if args.add:
        try:
            print(add_run(args.add, args.results, args.name))
        except (OSError, ValueError) as error:
            parser.exit(1, f"{error}\n")
        return 0
    Path(args.out).write_text(render(load_records(args.results)))
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
