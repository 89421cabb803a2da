"""``workbench bench``: throughput of kernel configurations over proteins and replica counts."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from workbench.cli.errors import UsageError
from workbench.cli.output import folder_lock, refuse_existing
from workbench.cli.parser import command_parser
from workbench.model.architectures import ARCHITECTURES
from workbench.model.deep_potential import DP_BACKENDS
from workbench.model.network_config import config_mapping
from workbench.model.options import PRESETS
from workbench.model.tensor_product import TP_BACKENDS
from workbench.settings_error import SettingsError


def add_parser(subparsers) -> None:
    """``workbench bench`` and its options."""
    bench = command_parser(
        subparsers, "bench",
        "throughput benchmarks: warm-up excluded, the median of timed windows of whole MD steps",
    )
    bench.add_argument("--proteins", default="cln025,2jof,1yrf,1enh,2a3d",
                       help="comma list of bundled names or PDB files, each optionally NAME*N "
                       "for N copies in one system (1enh*372: 100,068 beads)")
    bench.add_argument("--replicas", default="64", help="comma list: a replica sweep")
    bench.add_argument(
        "--configs", default="baseline",
        help=f"comma list of presets ({', '.join(PRESETS)}) or techniques joined by + (e.g. "
        "tabulated_filter+cuda_graph), each optionally with -fp16 or -bf16 (e.g. "
        "all+tables-fp16)",
    )
    bench.add_argument(
        "--arch", default="schnet",
        help=f"comma list of network architectures ({', '.join(ARCHITECTURES)}): every "
        "config runs for each (the demo model of each; a --model file must hold it)",
    )
    bench.add_argument(
        "--tp-backend", default=None,
        help=f"comma list of convolution backends ({', '.join(TP_BACKENDS)}) of the nequip "
        "network (needs nequip in --arch): every config of it runs with each, the same run; "
        "a record names the backend that ran (e3nn where one cannot run here)",
    )
    bench.add_argument(
        "--dp-backend", default=None,
        help=f"comma list of Deep Potential evaluators ({', '.join(DP_BACKENDS)}) of the dp "
        "network (needs dp in --arch): every config of it runs with each, the same run; "
        "deepmd is deepmd-kit's own model of the same weights, with the engine's dp "
        "techniques off; a record names the one that ran (engine where deepmd-kit cannot "
        "run) and why",
    )
    bench.add_argument("--steps", type=int, default=200, help="timed steps per window")
    bench.add_argument("--warmup", type=int, default=30)
    bench.add_argument("--repeats", type=int, default=3)
    bench.add_argument("--breakdown", action="store_true", help="step-time breakdown")
    bench.add_argument(
        "--launches", action="store_true", help="count kernel launches per step (profiler)"
    )
    bench.add_argument("--profile", action="store_true", help="print the top device kernels")
    bench.add_argument(
        "--model", default="demo",
        help="demo (the untrained demo model, which keeps each protein near its "
        "native edge count as the protocol wants), shipped, or a model file",
    )
    bench.add_argument(
        "--network", default=None, metavar="MAPPING",
        help="config keys of the demo model's network as a YAML/JSON mapping, say "
        "'{irreps: 32x0e + 32x1o, radial_width: 32}' (a recipe's sizes); unset keys keep "
        "the demo's; unknown keys are refused; the records name them with the model",
    )
    bench.add_argument("--device", default="auto")
    bench.add_argument("--out", default="artifacts/bench")
    bench.add_argument("--overwrite", action="store_true",
                       help="replace bench.json and bench.md of an earlier benchmark in --out")
    bench.set_defaults(execute=execute)


def execute(args) -> int:
    """Body of ``workbench bench``."""
    from workbench.benchmark import BenchProtocol, bench_cases

    proteins = [p.strip() for p in args.proteins.split(",") if p.strip()]
    try:
        replicas = [int(r) for r in args.replicas.split(",") if r.strip()]
    except ValueError:
        raise UsageError(f"--replicas must be a comma list of counts, got {args.replicas!r}") \
            from None
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    architectures = tuple(a.strip() for a in args.arch.split(",") if a.strip())
    protocol = BenchProtocol(args.steps, args.warmup, args.repeats)
    try:
        cases = bench_cases(proteins, replicas, configs,
                            None if args.model == "shipped" else args.model, architectures,
                            _backends(args.tp_backend), _backends(args.dp_backend),
                            _network(args.network))
    except SettingsError:
        raise
    except ValueError as error:  # a configuration name
        raise UsageError(f"--configs: {error}") from None
    with folder_lock(args.out, "benchmark folder"):
        refuse_existing([Path(args.out) / name for name in ("bench.json", "bench.md")],
                        args.overwrite)
        return run_cases(args, cases, protocol)


def _backends(text: str | None) -> tuple[str, ...] | None:
    """The backends of a comma list option (``--tp-backend``, ``--dp-backend``), None when
    not given."""
    return None if text is None else tuple(b.strip() for b in text.split(",") if b.strip())


def run_cases(args, cases, protocol) -> int:
    """Run the benchmark cases, print each result and write the tables to ``args.out``."""
    from workbench.benchmark import markdown_table, network_label, run_case, write_results

    command = "workbench " + " ".join(sys.argv[1:]) if sys.argv[1:] else "workbench bench"
    records = []
    failures = 0
    for done, case in enumerate(cases):
        if done:  # what has finished is kept if the command is stopped part-way
            write_results(records, args.out, command, unfinished=len(cases) - done)
        try:
            record = run_case(
                case, args.device, protocol.steps, protocol.warmup, protocol.repeats,
                args.breakdown, profile=args.profile, launches=args.launches,
            )
        except torch.cuda.OutOfMemoryError:
            print(f"{case.protein} × {case.replicas} {case.network} {case.label}: out of "
                  "memory", flush=True)
            torch.cuda.empty_cache()
            continue
        except Exception as exc:  # noqa: BLE001 - one failing case must not end the table
            print(f"{case.protein} × {case.replicas} {case.network} {case.label}: failed: "
                  f"{exc!r}", flush=True)
            failures += 1
            continue
        records.append(record)
        print(
            f"{record['protein']} × {record['replicas']} {network_label(record)} "
            f"{record['label']} ({record['force_path']}): "
            f"{record['timestep_mol_per_s']:,.0f} timestep·mol/s"
            + (f", breakdown {record['breakdown']}" if "breakdown" in record else ""),
            flush=True,
        )
        if "profile" in record:
            print(record.pop("profile"), flush=True)
    json_path, md_path = write_results(records, args.out, command)
    print(markdown_table(records))
    print(f"wrote {json_path} and {md_path}")
    return 1 if failures else 0


def _network(text: str | None) -> dict | None:
    """``--network`` read as YAML (JSON is YAML,
    `workbench.model.network_config.config_mapping`); None without it.

    Raises
    ------
    UsageError
        Not a mapping.
    """
    if text is None:
        return None
    given = config_mapping(text)
    if given is None:
        raise UsageError(f"--network must be a mapping of config keys, got {text!r}")
    return given
