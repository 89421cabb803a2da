"""``workbench run --gpus N`` and ``workbench run --ray ADDRESS``.

The run's replicas are spread over the GPUs of this machine (one process each,
:mod:`workbench.distributed.launcher`) or over the actors of a Ray cluster
(:mod:`workbench.distributed.ray_ensemble`). With ``--out`` both write
``metrics.csv`` (global replica numbers) and ``summary.json``; a Ray run also
keeps one checkpoint per shard in ``OUT/shards/`` and continues from them with
``--resume``. Neither writes trajectories.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from workbench.cli.errors import UsageError
from workbench.cli.output import acceptance_text, prepare_output, summary_table
from workbench.distributed.reports import MetricsReport
from workbench.files import atomic_write_text
from workbench.md.reporters import MetricsReporter
from workbench.runner import RunSettings
from workbench.units import ns_per_day

SHARD_FOLDER = "shards"


def add_distributed_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``workbench run`` that spread a run over GPUs or machines."""
    group = parser.add_argument_group("spread over GPUs or machines")
    group.add_argument(
        "--gpus",
        type=int,
        default=None,
        metavar="N",
        help="shard the replicas over N GPUs of this machine, one process each "
        "(torch.distributed, NCCL; a temperature ladder exchanges across all of them); "
        "with --device cpu: N CPU processes (gloo)",
    )
    group.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="run the shards as Ray actors: 'auto' (the cluster this machine belongs to), "
        "'ray://HEAD:10001', or 'local' (start Ray on this machine)",
    )
    group.add_argument("--actors", type=int, default=None, help="with --ray: shards (default 1)")
    group.add_argument(
        "--checkpoint-interval",
        type=int,
        default=None,
        help="with --ray: steps between shard checkpoints (default 10 × --save-interval)",
    )
    group.add_argument(
        "--gpus-per-actor",
        type=float,
        default=None,
        help="with --ray: GPUs each actor holds (default 1 if the cluster has GPUs, else 0)",
    )
    group.add_argument("--cpus-per-actor", type=float, default=1.0, help="with --ray")
    group.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds: limit on a --gpus run (default 24 h) or on each --ray chunk (none)",
    )


def wants_distributed(args) -> bool:
    """Whether ``workbench run`` was asked to spread the run out."""
    return args.gpus is not None or args.ray is not None


def _printer(args, steps: int, reporter: MetricsReporter | None):
    def on_report(report: MetricsReport) -> None:
        if reporter is not None:
            report.write_csv(reporter)
        if not args.quiet:
            summary = report.summary()
            q = "n/a" if summary["q_mean"] is None else f"{summary['q_mean']:.3f}"
            print(
                f"step {report.step}/{steps} | {report.timestep_mol_per_s:,.0f} timestep·mol/s "
                f"| Q {q}",
                flush=True,
            )

    return on_report


def _launched(launch, config, on_report, failure: type[Exception],
              *closing: Callable[[], object]):
    """``launch(config, on_report)``'s result, or None once its ``failure`` is printed;
    each of ``closing`` is called either way."""
    try:
        return launch(config, on_report)
    except failure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    finally:
        for close in closing:
            close()


def _summary(settings: RunSettings, last: MetricsReport | None, rate: float, extra: dict) -> dict:
    from workbench.teacher import state_thresholds

    folded_q = state_thresholds(settings.protein)[0]
    summary = last.summary() if last is not None else {}
    folded = None
    if last is not None and summary["q_mean"] is not None:
        live = ~last.metrics["frozen"]
        folded = float((last.metrics["q"][live] > folded_q).mean())
    return {
        "protein": settings.protein,
        "replicas": settings.replicas,
        "steps": summary.get("step", 0),
        "timestep_mol_per_s": rate,
        "ns_per_day": ns_per_day(rate, settings.timestep_fs),
        "rmsd_mean": summary.get("rmsd_mean"),
        "q_mean": summary.get("q_mean"),
        "folded_fraction": folded,
        "folded_q": folded_q,
        "frozen_replicas": summary.get("frozen_replicas", []),
        **extra,
    }


def _finish(out: Path | None, summary: dict, rows: list[tuple[str, str]], files: str = "") -> int:
    if out is not None:
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
    q = summary["q_mean"]
    rows = [
        ("throughput", f"{summary['timestep_mol_per_s']:,.1f} timestep·mol/s"),
        ("", f"{summary['ns_per_day']:,.2f} ns/day (all replicas)"),
        *rows,
        ("Q", "n/a" if q is None else f"{q:.3f} mean"),
        ("frozen replicas", ", ".join(map(str, summary["frozen_replicas"])) or "none"),
        ("files", f"{out}: metrics.csv, summary.json{files}" if out else "none (no --out)"),
    ]
    print(summary_table(rows))
    return 0


def run_distributed(args, settings: RunSettings) -> int:
    """Body of ``workbench run`` with ``--gpus`` or ``--ray``."""
    if args.gpus is not None and args.ray is not None:
        raise UsageError("--gpus (this machine) and --ray (a cluster) exclude each other")
    if args.gpus is not None:
        for flag, given in (("--resume", args.resume), ("--actors", args.actors is not None)):
            if given:
                raise UsageError(f"{flag} works with --ray, not with --gpus")
        return _run_sharded(args, settings)
    return _run_on_ray(args, settings)


def _run_sharded(args, settings: RunSettings) -> int:
    from workbench.distributed.launcher import ShardedRunError, ShardedSettings, launch_sharded

    config = ShardedSettings(settings, ranks=args.gpus, timeout_s=args.timeout or 86400.0)
    try:
        device, ranks = config.resolve()
    except ValueError as error:
        raise UsageError(f"--gpus: {error}") from None
    out = prepare_output(args)
    reporter = MetricsReporter(out / "metrics.csv", settings.save_interval) if out else None
    print(
        f"{settings.protein}: {settings.replicas} replicas over {ranks} processes on "
        f"{device}, {settings.steps} steps"
    )
    result = _launched(launch_sharded, config, _printer(args, settings.steps, reporter),
                       ShardedRunError, *([reporter.close] if reporter else []))
    if result is None:
        return 1
    last = result.reports[-1] if result.reports else None
    extra = {
        "ranks": len(result.shards),
        "backend": result.backend,
        "rank_timestep_mol_per_s": result.rank_timestep_mol_per_s,
        "tempering": result.tempering,
    }
    summary = _summary(settings, last, result.timestep_mol_per_s, extra)
    rows = [("processes", f"{len(result.shards)} ({result.backend})")]
    if result.tempering is not None:
        rows.append(("exchange acceptance", acceptance_text(result.tempering["acceptance"])))
    return _finish(out, summary, rows)


def _run_on_ray(args, settings: RunSettings) -> int:
    try:
        import ray

        from workbench.distributed.ray_ensemble import EnsembleError, EnsembleSettings, run_ensemble
    except ImportError as exc:
        raise UsageError(f"--ray needs Ray: pip install 'cg-workbench[cluster]' ({exc})") from None

    out = prepare_output(args, resume_from=SHARD_FOLDER)
    if out is None:
        raise UsageError("--ray needs --out: the shards' checkpoints are kept there")
    shards = out / SHARD_FOLDER
    if shards.is_dir() and not args.resume:
        if not args.overwrite:
            raise UsageError(f"{shards} holds shard checkpoints; pass --overwrite or --resume")
        for path in shards.glob("shard_*"):
            path.unlink()
    interval = args.checkpoint_interval or 10 * settings.save_interval
    config = EnsembleSettings(
        settings,
        actors=args.actors or 1,
        checkpoint_dir=str(out / SHARD_FOLDER),
        checkpoint_interval=interval,
        gpus_per_actor=args.gpus_per_actor,
        cpus_per_actor=args.cpus_per_actor,
        chunk_timeout_s=args.timeout,
        resume=args.resume,
    )
    try:
        config.validate()
    except ValueError as error:
        raise UsageError(f"--ray: {error}") from None
    ray.init(address=None if args.ray == "local" else args.ray)
    reporter = MetricsReporter(out / "metrics.csv", settings.save_interval, append=args.resume)
    print(
        f"{settings.protein}: {settings.replicas} replicas over {config.actors} Ray actors, "
        f"checkpoints every {interval} steps in {config.checkpoint_dir}"
    )
    result = _launched(run_ensemble, config, _printer(args, settings.steps, reporter),
                       EnsembleError, reporter.close, ray.shutdown)
    if result is None:
        return 1
    last = result.reports[-1] if result.reports else None
    restarts = {str(k): v for k, v in result.restarts.items()}
    extra = {"actors": config.actors, "restarts": restarts, "wall_s": result.wall_s}
    summary = _summary(settings, last, result.timestep_mol_per_s, extra)
    restarted = ", ".join(f"shard {k} from step {v}" for k, v in restarts.items()) or "none"
    rows = [("actors", str(config.actors)), ("restarts", restarted)]
    return _finish(out, summary, rows, f", {SHARD_FOLDER}/ ({config.actors} checkpoints)")
