"""``workbench run``: Langevin MD of many replicas, on one device or spread out.

Exit codes: 0 done, 1 a write failed (disk full; the message says how to resume) or every
replica was frozen by the safety checks, 2 bad input, 130 stopped by Ctrl-C (SIGINT), 143
stopped by SIGTERM (128 + the signal number, the shell's convention).

SIGTERM, which batch schedulers send at a time limit, ends a run the way Ctrl-C does: a
clean stop with a summary (`workbench.cli.stopping`).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from workbench.cli.errors import UsageError, flag
from workbench.cli.output import acceptance_text, folder_lock, prepare_output, summary_table
from workbench.cli.parser import command_parser
from workbench.cli.run_distributed import (
    add_distributed_arguments,
    run_distributed,
    wants_distributed,
)
from workbench.cli.stopping import exit_code, terminate_as_interrupt
from workbench.files import atomic_write_text
from workbench.md import NeighborSettings
from workbench.md.reporters import MetricsReporter, TrajectoryReporter
from workbench.md.simulation import CheckpointError
from workbench.model.architectures import ARCHITECTURES
from workbench.model.deep_potential import DP_BACKENDS
from workbench.model.options import PRECISIONS, PRESETS, KernelOptions
from workbench.model.tensor_product import TP_BACKENDS
from workbench.model_fit import bundled_match
from workbench.resume import (
    model_fingerprint,
    record_changes,
    recover_run_folder,
    settings_changes,
)
from workbench.run_folder import MANIFEST, read_manifest, write_manifest
from workbench.runner import (
    RunSettings,
    ThroughputMeter,
    prepare_run,
    timed_steps,
)
from workbench.teacher import state_thresholds


def add_parser(subparsers) -> None:
    """``workbench run`` and its options."""
    run = command_parser(subparsers, "run", "run Langevin MD of many replicas")
    run.add_argument("--protein", default="cln025",
                     help="bundled name or PDB file; NAME*N for N copies of it in one system "
                     "(e.g. 1enh*372, 100,068 beads; docs/large-systems.md)")
    run.add_argument("--mapping", default="five-bead", choices=["five-bead", "ca"])
    run.add_argument("--replicas", type=int, default=8)
    run.add_argument("--steps", type=int, default=1000)
    run.add_argument("--temperature", type=float, default=300.0, help="kelvin")
    run.add_argument(
        "--ladder",
        default=None,
        metavar="T_MIN:T_MAX:LEVELS",
        help="parallel tempering over a geometric temperature ladder (kelvin); "
        "replicas = levels × walkers",
    )
    run.add_argument(
        "--exchange-every", type=int, default=100, help="steps between exchanges (--ladder)"
    )
    run.add_argument("--dt", type=float, default=4.0, help="time step in fs")
    run.add_argument("--friction", type=float, default=1.0, help="1/ps")
    run.add_argument("--save-interval", type=int, default=100, help="steps between saves")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--device", default="auto", help="auto, cpu or cuda")
    run.add_argument(
        "--denatured-fraction", type=float, default=0.0,
        help="share of the replicas that start denatured (the rest native), in [0, 1]",
    )
    run.add_argument(
        "--denature-steps", type=int, default=25_000,
        help="steps without contact wells that make the denatured starts",
    )
    run.add_argument(
        "--model", default=None,
        help="saved potential (.pt), an mlcg CGSchNet or PaiNN checkpoint, a deepmd-kit "
        "se_e2_a model (checkpoint .pt or frozen .pth; with the protein's native priors), "
        "'teacher' (the "
        "protein's "
        "structure-based teacher; a variant: 'teacher:eps=0.25,dihedral=0.5,separation=4,"
        "barrier=0.3' sets any of contact depth ε (kcal/mol), dihedral strength (× ε), "
        "smallest contact separation (residues) and desolvation barrier height (× ε)), or "
        "'demo' (the untrained "
        "demo model); default: the shipped model of --protein (of --arch where one ships)",
    )
    run.add_argument(
        "--arch", default=None, choices=list(ARCHITECTURES),
        help="network architecture: of the untrained demo model, and the one a --model "
        "file must hold (default: the --model file's network; schnet for the demo model)",
    )
    run.add_argument(
        "--tp-backend", default="e3nn", choices=list(TP_BACKENDS),
        help="convolution backend of a tensor-product network (--arch nequip): e3nn "
        "(reference), openequivariance or cuequivariance (a CUDA GPU and the package; "
        "otherwise e3nn runs, with a notice)",
    )
    run.add_argument(
        "--dp-backend", default="engine", choices=list(DP_BACKENDS),
        help="who evaluates a Deep Potential (--arch dp): engine (its own path) or deepmd "
        "(deepmd-kit's model of the same weights: a deepmd-kit --model or the demo model, "
        "and deepmd-kit installed; otherwise the engine's path runs, with a notice)",
    )
    run.add_argument(
        "--structures", default=None,
        help="mlcg *_configurations.pt: starting structures for an mlcg --model",
    )
    run.add_argument(
        "--kernels", default="baseline",
        help=f"a preset ({', '.join(PRESETS)}) or presets and techniques joined by +, "
        "optionally followed by -fp16 or -bf16",
    )
    run.add_argument(
        "--mlp-precision", default=None, choices=PRECISIONS,
        help="MLP precision (default: the --kernels suffix's, else fp32)",
    )
    run.add_argument("--skin", type=float, default=2.0, help="Verlet skin, Å")
    run.add_argument("--exclude-bonded", action="store_true")
    run.add_argument("--format", default="dcd", choices=TrajectoryReporter.FORMATS)
    run.add_argument("--no-trajectory", action="store_true", help="write metrics only")
    run.add_argument("--out", default=None, help="output folder (default: none written)")
    run.add_argument("--overwrite", action="store_true", help="replace an earlier run's files")
    run.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    run.add_argument(
        "--continue-with-new-settings", action="store_true",
        help="with --resume: go on with changed --dt, --temperature, --friction, --model, "
        "--kernels, ... (recorded in OUT/run.json); without it such a resume is refused",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    add_distributed_arguments(run)
    run.set_defaults(execute=execute)


def kernel_options(spec: str, precision: str | None) -> KernelOptions:
    """``--kernels`` (see `KernelOptions.parse`) with ``--mlp-precision`` if given."""
    try:
        options = KernelOptions.parse(spec)
    except ValueError as error:
        raise UsageError(f"--kernels: {error}") from None
    return options if precision is None else replace(options, mlp_precision=precision)


def parse_ladder(text: str | None) -> tuple[float, float, int] | None:
    """``"T_MIN:T_MAX:LEVELS"`` as ``(t_min K, t_max K, levels)``; None stays None."""
    if text is None:
        return None
    parts = text.split(":")
    try:
        if len(parts) != 3:
            raise ValueError(text)
        return float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise UsageError(
            f"--ladder must be T_MIN:T_MAX:LEVELS (kelvin, kelvin, count), e.g. 300:450:4; "
            f"got {text!r}"
        ) from None


def run_settings(args) -> RunSettings:
    """The settings of ``workbench run``'s options."""
    return RunSettings(
        protein=args.protein,
        replicas=args.replicas,
        steps=args.steps,
        temperature=args.temperature,
        ladder=parse_ladder(args.ladder),
        exchange_every=args.exchange_every,
        timestep_fs=args.dt,
        friction=args.friction,
        save_interval=args.save_interval,
        seed=args.seed,
        device=args.device,
        model=args.model,
        architecture=args.arch,
        tp_backend=args.tp_backend,
        dp_backend=args.dp_backend,
        structures=args.structures,
        mapping=args.mapping,
        options=kernel_options(args.kernels, args.mlp_precision),
        neighbors=NeighborSettings(skin=args.skin, exclude_bonded=args.exclude_bonded),
        denatured_fraction=args.denatured_fraction,
        denature_steps=args.denature_steps,
    )



def trajectory_format(args) -> str | None:
    """The trajectory format the run writes (None with ``--no-trajectory``)."""
    return None if args.no_trajectory else args.format


def resume_changes(args, out: Path, manifest: dict, settings: RunSettings,
                   fingerprint: str) -> dict:
    """The physics settings a resume changes (refused unless
    ``--continue-with-new-settings``); a changed fixed setting or trajectory format is
    always refused."""
    fixed, physics = settings_changes(manifest, settings, fingerprint)
    if "trajectory" in manifest and manifest["trajectory"] != trajectory_format(args):
        fixed["trajectory"] = (manifest["trajectory"], trajectory_format(args))

    def listed(changes):
        return ", ".join(f"{flag(k)} {a!r} → {b!r}" for k, (a, b) in changes.items())

    if fixed:
        raise UsageError(f"--resume: {out} holds a run with other settings that a resume "
                         f"cannot change: {listed(fixed)}")
    if physics and not args.continue_with_new_settings:
        raise UsageError(f"--resume would change the physics of the run in {out}: "
                         f"{listed(physics)}; pass --continue-with-new-settings to go on with "
                         f"them (the change is recorded in {MANIFEST})")
    return physics


def execute(args) -> int:
    """Body of ``workbench run``: the output folder locked while the run writes it."""
    began = time.perf_counter()
    settings = run_settings(args)
    with folder_lock(args.out):
        if wants_distributed(args):
            return run_distributed(args, settings)
        return run_here(args, settings, prepare_output(args), began)


def run_here(args, settings: RunSettings, out: Path | None, began: float) -> int:
    """A run on this machine, written to ``out`` (locked, checked by `prepare_output`)."""
    manifest = read_manifest(out) if args.resume else None
    # a resumed run takes its positions from the checkpoint: make no denatured starts
    prepared = prepare_run(replace(settings, denatured_fraction=0.0) if args.resume
                           else settings)
    sim, tempering = prepared.simulation, prepared.tempering
    for notice in prepared.notices:
        print(f"NOTE: {notice}")
    if tempering is None:
        temperature = f"{settings.temperature:g} K"
    else:
        low, high = tempering.temperatures[[0, -1]].tolist()
        temperature = f"{low:g}–{high:g} K in {tempering.levels} levels"
    applied = sim.applied_options()
    print(
        f"{prepared.system.name}: {prepared.system.n_beads} beads, {settings.replicas} replicas, "
        f"{temperature}, dt {settings.timestep_fs:g} fs on {sim.device}; "
        f"kernels: {', '.join(applied.enabled()) or 'baseline (PyTorch)'}"
    )
    fmt = trajectory_format(args)
    metrics_reporter = traj_reporter = None
    if out is not None:
        fingerprint = model_fingerprint(sim.potential)
        if args.resume:
            changes = resume_changes(args, out, manifest, settings, fingerprint)
            extra = sim.load_checkpoint(out / "checkpoint.pt")
            if tempering is not None:
                if "tempering" not in extra:
                    raise CheckpointError(f"{out / 'checkpoint.pt'} holds no exchange state "
                                          "(written by an older version, or without --ladder)")
                tempering.load_state_dict(extra["tempering"])
            rounds = None if tempering is None else tempering.rounds
            for note in recover_run_folder(out, sim.step_count, settings.save_interval,
                                           settings.replicas, rounds, fmt):
                print(f"NOTE: cut back to the checkpoint: {note}")
            if changes:
                record_changes(out, manifest, settings, fingerprint, sim.step_count, changes)
            print(f"resumed from step {sim.step_count}")
        else:
            write_manifest(out, settings, prepared.system, sim.potential.cutoff,
                           extra={"trajectory": fmt, "model_sha256": fingerprint})
        if tempering is not None:
            tempering.open_log(out / "exchanges.csv", append=args.resume)
        metrics_reporter = MetricsReporter(
            out / "metrics.csv", settings.save_interval, append=args.resume
        )
        sim.reporters.append(metrics_reporter)
        if fmt is not None:
            traj_reporter = TrajectoryReporter(
                out / "trajectory", prepared.system, settings.replicas,
                settings.save_interval, fmt, append=args.resume,
            )
            sim.reporters.append(traj_reporter)
    records = [r for r in (metrics_reporter, traj_reporter, tempering) if r is not None]

    from tqdm import tqdm

    meter = ThroughputMeter(settings.replicas, settings.timestep_fs, sim.device)
    setup_s = time.perf_counter() - began  # system, model, tables, checkpoint, files
    chunk = settings.save_interval
    bar = tqdm(total=settings.steps, unit="step", disable=args.quiet, dynamic_ncols=True)
    done = 0
    stop = failure = None
    saved_step = sim.step_count  # the step the checkpoint on disk holds
    try:
        with terminate_as_interrupt():
            # progress from the first step: chunks grow 1, 2, 4, ... up to the save
            # interval, and never cross a save (the checkpoint stays at every save)
            grow = 1
            while done < settings.steps:
                n = min(grow, chunk - done % chunk, settings.steps - done)
                grow = min(2 * grow, chunk)
                # the meter keeps one chunk per save interval: the first is the warm-up
                timed_steps(sim, meter, n, prepared.advance, new_chunk=done % chunk == 0)
                done += n
                q = float(sim.metrics()["q"].mean())
                rate = meter.timestep_mol_per_s()
                bar.set_postfix_str(
                    f"{rate / settings.replicas:.1f} steps/s | {rate:,.0f} timestep·mol/s | "
                    f"{meter.ns_per_day():,.1f} ns/day | Q {q:.3f}"
                )
                bar.update(n)
                if out is not None and (done % chunk == 0 or done == settings.steps):
                    # the records first, then the checkpoint that covers them
                    for record in records:
                        record.flush()
                    state = {} if tempering is None else {"tempering": tempering.state_dict()}
                    sim.save_checkpoint(out / "checkpoint.pt", extra=state)
                    saved_step = sim.step_count
    except KeyboardInterrupt as caught:
        # Ctrl-C or SIGTERM (a scheduler's time limit): stop cleanly. The checkpoint and
        # the records it covers are on disk; --resume cuts off any later ones and goes on.
        stop = caught
    except OSError as error:  # a full disk, a lost mount: what was kept, how to go on
        failure = error
    finally:
        bar.close()
        for record in records:
            with contextlib.suppress(OSError):  # flushed up to the checkpoint already
                record.close()
    if failure is not None:
        kept = (f"the checkpoint of step {saved_step} and the records up to it are intact; "
                f"free the space and continue with --resume --out {out}"
                if out is not None and (out / "checkpoint.pt").exists()
                else "no checkpoint was saved yet: run again with --overwrite")
        print(f"error: writing the run failed at step {sim.step_count} ({failure}); {kept}",
              file=sys.stderr)
        return 1

    metrics = {k: v.detach().float().cpu() for k, v in sim.metrics().items()}
    live = ~metrics["frozen"].bool()
    has_q = bool(live.any()) and not bool(torch.isnan(metrics["q"]).all())
    q, r = metrics["q"], metrics["rmsd"]
    frozen = sim.frozen_report()
    peak = meter.peak_memory_gb()
    folded_q = state_thresholds(bundled_match(prepared.system))[0]
    summary = {
        "protein": prepared.system.name,
        "beads": prepared.system.n_beads,
        "replicas": settings.replicas,
        "steps": sim.step_count,
        "device": str(sim.device),
        "gpu": torch.cuda.get_device_name(sim.device) if sim.device.type == "cuda" else None,
        "kernels": applied.to_dict(),
        "kernels_requested": settings.options.to_dict(),
        "timestep_mol_per_s": meter.timestep_mol_per_s(),
        "ns_per_day": meter.ns_per_day(),
        "setup_s": setup_s,
        "warmup_overhead_s": meter.warmup_overhead_s(),
        "peak_memory_gb": peak,
        "rmsd_mean": float(r[live].mean()) if live.any() else None,
        "q_mean": float(q[live].mean()) if has_q else None,
        "folded_fraction": float((q[live] > folded_q).float().mean()) if has_q else None,
        "folded_q": folded_q,
        "frozen_replicas": frozen,
        "tempering": None if tempering is None else tempering.summary(),
        "notices": prepared.notices,
        "interrupted": stop is not None,
        "checkpoint_step": (saved_step if out is not None and (out / "checkpoint.pt").exists()
                            else None),
    }
    files = []
    if out is not None:
        try:
            atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
        except OSError as error:
            print(f"error: the run ended but its summary could not be written ({error}); "
                  f"the checkpoint of step {saved_step} is intact", file=sys.stderr)
            return 1
        files = [MANIFEST, "metrics.csv", "checkpoint.pt", "summary.json"]
        if tempering is not None:
            files.append("exchanges.csv")
        if traj_reporter is not None:
            count = len(traj_reporter.paths)
            files.append(f"trajectory/ ({count} × .{fmt} + topology.pdb)")
    rows = [
        ("throughput", f"{summary['timestep_mol_per_s']:,.1f} timestep·mol/s"),
        ("", f"{summary['ns_per_day']:,.2f} ns/day (all replicas)"),
        ("start-up", f"{setup_s:.1f} s before the first step" + (
            "" if summary["warmup_overhead_s"] is None
            else f", then {summary['warmup_overhead_s']:.1f} s more in the first {chunk} steps "
            "than at the later rate (compilation, graph capture)")),
        ("peak memory", "n/a (CPU)" if peak is None else f"{peak:.2f} GB"),
        ("RMSD (CA)", f"{summary['rmsd_mean']:.2f} Å mean" if live.any() else "n/a"),
        ("Q", f"{summary['q_mean']:.3f} mean" if has_q
               else "n/a (no native contacts)" if live.any() else "n/a (every replica frozen)"),
        (f"folded (Q > {folded_q:g})", f"{summary['folded_fraction']:.0%}" if has_q else "n/a"),
        ("frozen replicas", ", ".join(f"{i}@step {s}" for i, s in frozen) or "none"),
        ("files", (f"{out}: " + ", ".join(files)) if out else "none (no --out)"),
    ]
    if tempering is not None:
        acceptance = acceptance_text(summary["tempering"]["acceptance"])
        rows.insert(-2, ("exchange acceptance", acceptance))
    print(summary_table(rows))
    if stop is not None:
        if out is None:
            resume = ""
        elif (out / "checkpoint.pt").exists():
            resume = f"; --resume continues from step {saved_step}"
        else:
            resume = "; no checkpoint was saved yet"
        print(f"interrupted at step {sim.step_count}{resume}", file=sys.stderr)
        return exit_code(stop)
    if frozen and not live.any():
        print(f"error: every replica was frozen by the safety checks (the first at step "
              f"{min(step for _, step in frozen)}): non-finite or huge forces; check the model",
              file=sys.stderr)
        return 1
    return 0
