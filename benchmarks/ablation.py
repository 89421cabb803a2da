"""The ablation, as the paper shows it: baseline, each technique alone, then the techniques
added one at a time in FP32 and with FP16 MLPs, then captured CUDA-graph steps, and last
this engine's tabulated filters (beyond the paper), on the five proteins:

    python -m benchmarks.ablation [--proteins cln025,2jof,1yrf,1enh,2a3d] [--replicas 64]
        [--steps 200] [--repeats 3] [--warmup 30] [--model demo|shipped|FILE]
        [--out artifacts/ablation] [--resume] [--budget-s SECONDS] [--docs]
    python -m benchmarks.ablation --render RESULTS.json [MORE.json ...] [--docs]

The sequence is `workbench.model.ablation` (also the order of the workbench's live-switch
walk). Each configuration is timed as ``workbench bench`` times it
(`workbench.benchmark.run_case`, docs/benchmark-protocol.md); configurations that appear
in two rows are measured once. The folder ``--out`` gets the standard ``bench.json`` (and
``bench.md``) of ``workbench bench --out``, rewritten after every case, so that
``benchmarks/report.py`` reads it; ``--resume`` runs only the cases it lacks (a run cut
short, or ``--budget-s`` spent: past it, no further case is started). Then
``ablation.md`` (rows: the sequence; columns: the proteins; cells: timestep·mol/s and the
ratio to the same run's baseline) and ``ablation.png`` (speedup against the baseline per
protein, log axis).

``--render`` writes the table and the chart from existing record files without a GPU
(several files: a later file's record replaces an earlier one's; ratios are to the
baseline in the same file). Rows or proteins without a record are shown as "–".
``--docs`` also writes the table into docs/kernels.md between `START` and `END` and the
chart to docs/images/ablation.png; the speedup-demo notebook embeds that table (run
``make notebooks`` afterwards).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from benchmarks import replace_section
from workbench.model.ablation import GROUPS, ablation_configs, ablation_steps
from workbench.model.options import KernelOptions

PROTEINS = ("cln025", "2jof", "1yrf", "1enh", "2a3d")  # by size: 49 to 360 beads
START, END = "<!-- ablation:start -->", "<!-- ablation:end -->"
ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "kernels.md"
DOC_IMAGE = ROOT / "docs" / "images" / "ablation.png"
MISSING = "–"


# ---------------------------------------------------------------- records to a table

def record_options(record: dict) -> KernelOptions | None:
    """The switches a record ran with: its ``options`` (fields a newer or older version
    lacks take their defaults), else its label parsed; None if neither is understood."""
    options = record.get("options")
    if options is None:
        try:
            return KernelOptions.parse(record["label"])
        except (KeyError, ValueError):
            return None
    known = {f.name for f in fields(KernelOptions)}
    if any(value for name, value in options.items() if name not in known):
        return None  # a technique this version does not have was on
    try:
        return KernelOptions(**{k: v for k, v in options.items() if k in known})
    except (TypeError, ValueError):
        return None


@dataclass
class Cell:
    """One protein's figure in one row: the rate and its ratio to the same run's baseline
    (None where that run has no baseline of the protein)."""

    rate: float
    ratio: float | None
    source: str


@dataclass
class Row:
    config: str
    group: str
    step: str
    paper: bool
    cells: dict[str, Cell] = field(default_factory=dict)


@dataclass
class Ablation:
    """The table: rows in sequence order, the proteins, and where the figures come from
    (``runs``: one ``(source, environment, command)`` per file that gave a figure)."""

    rows: list[Row]
    proteins: list[str]
    replicas: int
    model: str
    runs: list[tuple[str, dict, str]]


def collect(payloads: list[tuple[str, dict]], proteins: list[str] = PROTEINS,
            replicas: int = 64, model: str = "demo") -> Ablation:
    """The ablation table from record files, ``(name, bench.json payload)`` in order.

    A record counts for a row when it ran that row's switches (by its ``options``, not its
    label: ``all`` and the six techniques joined by ``+`` are one configuration) on one of
    ``proteins`` with ``replicas`` replicas and ``model``. Of several, the later (later file,
    later in its file) counts. Nothing is filled in where no record is found.

    Raises
    ------
    ValueError
        The files come from different GPUs (their figures do not belong in one table).
    """
    gpus = {payload["environment"].get("gpu") for _, payload in payloads}
    if len(gpus) > 1:
        raise ValueError(f"record files from different GPUs ({', '.join(map(str, gpus))}); "
                         "render one GPU at a time")
    found: dict[tuple[str, KernelOptions], tuple[dict, str]] = {}
    baselines: dict[tuple[str, str], float] = {}
    for source, payload in payloads:
        for record in payload["records"]:
            if (record.get("protein") not in proteins or record.get("replicas") != replicas
                    or record.get("model", "demo") != model):
                continue
            options = record_options(record)
            if options is None:
                continue
            found[(record["protein"], _key(options))] = (record, source)
            if options.is_baseline:
                baselines[(source, record["protein"])] = record["timestep_mol_per_s"]
    rows, used = [], []
    for step in ablation_steps():
        row = Row(step.config, step.group, step.step, step.paper)
        for protein in proteins:
            hit = found.get((protein, _key(step.options)))
            if hit is None:
                continue
            record, source = hit
            base = baselines.get((source, protein))
            rate = record["timestep_mol_per_s"]
            row.cells[protein] = Cell(rate, rate / base if base else None, source)
            used.append(source)
        rows.append(row)
    runs = [(source, payload["environment"], payload.get("command", ""))
            for source, payload in payloads if source in used]
    return Ablation(rows, list(proteins), replicas, model, runs)


def _key(options: KernelOptions) -> tuple:
    return tuple(sorted(options.to_dict().items()))


def _cell(cell: Cell | None) -> str:
    if cell is None:
        return MISSING
    ratio = MISSING if cell.ratio is None else f"{cell.ratio:.2f}×"
    return f"{cell.rate:,.0f} ({ratio})"


def markdown(ablation: Ablation) -> str:
    """The table as Markdown: the GPU and command(s) on top, then one row per step of the
    sequence, one column per protein, cells ``timestep·mol/s (ratio to baseline)``."""
    lines = []
    if not ablation.runs:
        lines.append("No records of the ablation yet.")
    for source, env, command in ablation.runs:
        origin = f" · records `{source}`"
        lines.append(f"GPU: {env.get('gpu') or 'CPU'} · torch {env.get('torch')} · triton "
                     f"{env.get('triton')} · {env.get('date')}{origin}")
        lines += ["", f"Command: `{command}`", ""]
    lines += [
        f"{ablation.replicas} replicas, {ablation.model} model; timestep·mol/s and, in "
        "brackets, the ratio to the same run's `baseline`; – not measured.",
        "",
        "| group | step | " + " | ".join(p.upper() for p in ablation.proteins) + " |",
        "|---|---|" + "---|" * len(ablation.proteins),
    ]
    previous = None
    for row in ablation.rows:
        group = "" if row.group == previous else row.group
        previous = row.group
        name = row.step if row.step.startswith("+") else f"`{row.step}`"
        if not row.paper:
            group = f"*{group}*" if group else ""
        lines.append(f"| {group} | {name} | "
                     + " | ".join(_cell(row.cells.get(p)) for p in ablation.proteins) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------- the chart

def plot(ablation: Ablation, path: str | Path) -> Path:
    """Grouped bars of the speedup against the baseline, one bar per protein and step, on a
    log axis (bars start at 1×: a slowdown points down), the groups of the sequence labelled
    and the last (beyond the paper) shaded; written as PNG with matplotlib's Agg backend.
    Steps without a ratio have no bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator

    rows, proteins = ablation.rows, ablation.proteins
    width = 0.8 / max(len(proteins), 1)
    fig, ax = plt.subplots(figsize=(max(10.0, 0.62 * len(rows) + 2), 5.6), dpi=120)
    ratios = [c.ratio for r in rows for c in r.cells.values() if c.ratio]
    for k, protein in enumerate(proteins):
        xs, ys = [], []
        for i, row in enumerate(rows):
            cell = row.cells.get(protein)
            if cell is not None and cell.ratio:
                xs.append(i - 0.4 + width * (k + 0.5))
                ys.append(cell.ratio)
        ax.bar(xs, [y - 1.0 for y in ys], bottom=1.0, width=width, color=f"C{k}", zorder=3)
    ax.set_yscale("log")
    low = min([*ratios, 1.0]) / 1.5
    high = max([*ratios, 1.0]) * 2.5
    ax.set_ylim(low, high)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.axhline(1.0, color="0.3", linewidth=0.8, zorder=2)
    ax.grid(axis="y", color="0.88", zorder=0)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([row.step for row in rows], rotation=55, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    for group in GROUPS:
        members = [i for i, row in enumerate(rows) if row.group == group]
        if not members:
            continue
        first, last = members[0], members[-1]
        if not rows[first].paper:
            ax.axvspan(first - 0.5, last + 0.5, color="0.93", zorder=1)
        if first > 0:
            ax.axvline(first - 0.5, color="0.6", linewidth=0.6, zorder=2)
        ax.text((first + last) / 2, high / 1.12, group, ha="center", va="top", fontsize=8,
                style="italic" if not rows[first].paper else "normal")
    ax.set_ylabel("speedup against the baseline (timestep·mol/s)")
    gpus = sorted({env.get("gpu") or "CPU" for _, env, _ in ablation.runs})
    ax.set_title(f"Ablation, {ablation.replicas} replicas, {ablation.model} model"
                 + (f", {', '.join(gpus)}" if gpus else "") + " (no bar: not measured)",
                 fontsize=10)
    handles = [Patch(color=f"C{k}", label=p.upper()) for k, p in enumerate(proteins)]
    ax.legend(handles=handles, ncols=len(proteins), fontsize=8, loc="upper left",
              bbox_to_anchor=(0, -0.32), frameon=False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# ---------------------------------------------------------------- the documentation

def render_doc(doc: str, table: str) -> str:
    """``doc`` with the text between `START` and `END` replaced by ``table``.

    Raises
    ------
    ValueError
        ``doc`` lacks either marker, or has them out of order.
    """
    return replace_section(doc, START, END, table, "ablation")


def doc_table(doc: str) -> str:
    """The text between `START` and `END` of ``doc`` (what :func:`render_doc` wrote), or
    ``""`` where ``doc`` has no such section."""
    first, last = doc.find(START), doc.find(END)
    if first < 0 or last < first:
        return ""
    return doc[first + len(START):last].strip()


def write_outputs(ablation: Ablation, out: str | Path, docs: bool = False,
                  doc: Path = DOC, image: Path = DOC_IMAGE) -> list[Path]:
    """``ablation.md`` and ``ablation.png`` in ``out`` (and, with ``docs``, the table in
    ``doc`` and the chart at ``image``); returns the paths written. Without matplotlib the
    chart is left out and said so."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(ablation)
    if docs:  # the markers are checked before anything is written
        text = render_doc(doc.read_text(), table)
    written = [out / "ablation.md"]
    written[0].write_text(table + "\n")
    try:
        chart = plot(ablation, out / "ablation.png")
        written.append(chart)
    except ImportError:
        chart = None
        print("ablation: matplotlib is not installed, no chart (render it elsewhere with "
              "--render)", file=sys.stderr)
    if docs:
        doc.write_text(text)
        written.append(doc)
        if chart is not None:
            image.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(chart, image)
            written.append(image)
    return written


def load(paths: list[str | Path]) -> list[tuple[str, dict]]:
    """``(name, payload)`` of each run, in the order given.

    A path is a ``bench.json``, a results file of ``benchmarks/results/`` (all its runs, in
    the order they were added), or ``FILE#RUN`` for one named run of such a file. A run's
    name is the file's name (``#RUN`` added for a results file's runs), or the path as given
    where two files share a name (``1enh/bench.json``, ``2a3d/bench.json``).
    """
    from benchmarks.report import read_runs

    files = [str(p).partition("#")[0] for p in paths]
    names = [Path(f).name for f in files]
    out = []
    for spec, file, name in zip(map(str, paths), files, names, strict=True):
        label = name if names.count(name) == 1 else file
        wanted = spec.partition("#")[2]
        runs = read_runs(file)
        if wanted:
            runs = [r for r in runs if r.get("name") == wanted]
            if not runs:
                raise SystemExit(f"ablation: {file} has no run named {wanted!r}")
        for run in runs:
            out.append((f"{label}#{run['name']}" if "name" in run else label, run))
    return out


# ---------------------------------------------------------------- on the GPU

def pending_cases(proteins: list[str], configs: list[str], done: list[dict],
                  replicas: int = 64, model: str = "demo") -> list[tuple]:
    """``(protein, config)`` of every case not in ``done`` (records of this run) with
    ``replicas`` and ``model``, protein by protein, each protein's configurations in
    sequence order (its baseline first)."""
    have = {(r["protein"], _key(o)) for r in done
            if r.get("replicas") == replicas and r.get("model", "demo") == model
            and (o := record_options(r)) is not None}
    return [(p, c) for p in proteins for c in configs
            if (p, _key(KernelOptions.parse(c))) not in have]


def run_cases(args, command: str, run_case=None) -> tuple[list[dict], list[str]]:
    """Time the cases of the ablation into ``args.out``/bench.json (rewritten after each
    case; with ``args.resume`` its records are kept and only missing cases run). Returns
    the records and a line per case that failed or was left past ``args.budget_s``.

    ``run_case`` is `workbench.benchmark.run_case` (tests pass a stand-in).
    """
    import torch

    from workbench.benchmark import BenchCase, BenchProtocol, write_results

    if run_case is None:
        from workbench.benchmark import run_case
    protocol = BenchProtocol(args.steps, args.warmup, args.repeats)
    model = None if args.model == "shipped" else args.model
    bench = Path(args.out) / "bench.json"
    records = json.loads(bench.read_text())["records"] if args.resume and bench.exists() else []
    problems = []
    started, attempted = time.monotonic(), 0
    for protein, config in pending_cases(args.proteins, ablation_configs(), records,
                                         args.replicas, args.model):
        if (attempted and args.budget_s is not None
                and time.monotonic() - started > args.budget_s):
            problems.append(f"{protein} {config}: not started, past --budget-s "
                            f"{args.budget_s:.0f} s (run again with --resume)")
            continue
        attempted += 1
        case = BenchCase(protein, args.replicas, config, KernelOptions.parse(config), model)
        try:
            record = run_case(case, args.device, protocol.steps, protocol.warmup,
                              protocol.repeats)
        except torch.cuda.OutOfMemoryError:
            problems.append(f"{protein} × {args.replicas} {config}: out of memory")
            torch.cuda.empty_cache()
            continue
        except Exception as exc:  # noqa: BLE001 - one failing case must not end the table
            problems.append(f"{protein} × {args.replicas} {config}: failed: {exc!r}")
            continue
        print(f"{record['protein']} × {record['replicas']} {record['label']}: "
              f"{record['timestep_mol_per_s']:,.0f} timestep·mol/s", flush=True)
        records.append(record)
        write_results(records, args.out, command)
    if not bench.exists():  # nothing ran: the record file still says what was asked
        write_results(records, args.out, command)
    return records, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proteins", default=",".join(PROTEINS), help="comma list")
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200, help="timed steps per window")
    parser.add_argument("--repeats", type=int, default=3, help="timed windows (median)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    parser.add_argument("--model", default="demo",
                        help="demo (the protocol's), shipped, or a model file")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default="artifacts/ablation",
                        help="folder of bench.json, bench.md, ablation.md, ablation.png")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the bench.json of an earlier ablation in --out")
    parser.add_argument("--resume", action="store_true",
                        help="keep the records of --out/bench.json, run only the cases missing")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no case after this many seconds (finish with --resume)")
    parser.add_argument("--render", metavar="JSON", nargs="+", default=None,
                        help="write the table and chart from these record files (no GPU)")
    parser.add_argument("--docs", action="store_true",
                        help=f"also write the table into {DOC.relative_to(ROOT)} and the "
                             f"chart to {DOC_IMAGE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    args.proteins = [p.strip().lower() for p in args.proteins.split(",") if p.strip()]
    if args.render:
        files = args.render
    else:
        files = measure(args, argv)
        if files is None:
            return 1
    try:
        ablation = collect(load(files), args.proteins, args.replicas, args.model)
        written = write_outputs(ablation, args.out, docs=args.docs)
    except ValueError as err:
        print(f"ablation: {err}", file=sys.stderr)
        return 2
    print(markdown(ablation))
    print("wrote " + ", ".join(map(str, written)))
    if args.docs:
        print("the speedup-demo notebook embeds this table: run `make notebooks`")
    problems = [] if args.render else args.problems
    if problems:
        print(f"{len(problems)} case(s) failed or were not started:\n" + "\n".join(problems))
    return 1 if problems else 0


def measure(args, argv: list[str] | None) -> list[Path] | None:
    """The GPU run of :func:`main`; the record file, or None when it cannot start."""
    import torch

    from workbench.files import output_lock

    if (args.device == "auto" and not torch.cuda.is_available()) or args.device == "cpu":
        print("ablation: needs a CUDA GPU (--render RESULTS.json writes the table and chart "
              "of saved records)", file=sys.stderr)
        return None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bench = out / "bench.json"
    if bench.exists() and not (args.overwrite or args.resume):
        print(f"ablation: {bench} already exists; pass --resume to complete it or "
              "--overwrite to replace it", file=sys.stderr)
        return None
    command = "python -m benchmarks.ablation " + shlex.join(
        sys.argv[1:] if argv is None else argv)
    with output_lock(out / "workbench.lock", f"benchmark folder {out}"):
        _, args.problems = run_cases(args, command)
    return [bench]


if __name__ == "__main__":
    raise SystemExit(main())
