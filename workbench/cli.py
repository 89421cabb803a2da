"""Command line: ``workbench run``, ``workbench info``, ``workbench bench``, ``workbench train``."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from workbench.distributed.cli_run import (
    add_distributed_arguments,
    run_distributed,
    wants_distributed,
)
from workbench.md import NeighborSettings
from workbench.md.reporters import MetricsReporter, TrajectoryReporter, ensure_writable_folder
from workbench.model.options import PRECISIONS, KernelOptions
from workbench.runner import (
    TEMPERING_FILES,
    RunSettings,
    ThroughputMeter,
    existing_run_files,
    prepare_run,
    timed_steps,
)
from workbench.teacher import state_thresholds

KERNEL_PRESETS = {
    "baseline": KernelOptions.baseline,
    "all": KernelOptions.all_on,
    "all+tables": lambda: KernelOptions.all_on(tabulated_filter=True),
    "all+graph": lambda: KernelOptions.all_on(cuda_graph=True),
    "all+tables+graph": lambda: KernelOptions.all_on(tabulated_filter=True, cuda_graph=True),
    # the fastest path: tabulated filters (CSR-owned reductions inside) over the graph of the
    # Triton pair search, node layers in split-weight 3xTF32 kernels, fused Langevin steps,
    # all captured
    "tables+graph": lambda: KernelOptions(tabulated_filter=True, cuda_graph=True,
                                          fused_pair_search=True, fused_integrator=True,
                                          fused_update=True),
}


class UsageError(Exception):
    """A problem with the user's input, reported without a traceback."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write text to ``path`` through a temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def print_json(result: dict, out: str | None = None) -> None:
    """Print ``result`` as indented JSON and, with ``out``, write it there atomically."""
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        atomic_write_text(Path(out), text + "\n")


def kernel_options(preset: str, precision: str) -> KernelOptions:
    """Options from a preset name (or technique names joined by ``,`` or ``+``) and a
    precision."""
    if preset in KERNEL_PRESETS:
        options = KERNEL_PRESETS[preset]()
    else:
        names = [n.strip().replace("-", "_") for n in preset.replace("+", ",").split(",")]
        names = [n for n in names if n]
        known = set(KernelOptions.__dataclass_fields__) - {"mlp_precision"}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UsageError(
                f"unknown kernel technique(s) {unknown}; use 'baseline', 'all' or a comma list "
                f"of {sorted(known)}"
            )
        options = KernelOptions(**{n: True for n in names})
    options.mlp_precision = precision
    return options


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workbench", description="Coarse-grained neural-network MD engine"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run Langevin MD of many replicas")
    run.add_argument("--protein", default="cln025", help="bundled name or PDB file")
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
        help="saved potential (.pt), an mlcg CGSchNet checkpoint, 'teacher' (the protein's "
        "structure-based teacher; a variant: 'teacher:eps=0.25,dihedral=0.5,separation=4,"
        "barrier=0.3' sets any of contact depth ε (kcal/mol), dihedral strength (× ε), "
        "smallest contact separation (residues) and desolvation barrier height (× ε)), or "
        "'demo' (the untrained "
        "demo model); default: the shipped model of --protein",
    )
    run.add_argument(
        "--structures", default=None,
        help="mlcg *_configurations.pt: starting structures for an mlcg --model",
    )
    run.add_argument(
        "--kernels", default="baseline", help="baseline, all, all+tables, or a comma list"
    )
    run.add_argument("--mlp-precision", default="fp32", choices=PRECISIONS)
    run.add_argument("--skin", type=float, default=2.0, help="Verlet skin, Å")
    run.add_argument("--exclude-bonded", action="store_true")
    run.add_argument("--format", default="dcd", choices=TrajectoryReporter.FORMATS)
    run.add_argument("--no-trajectory", action="store_true", help="write metrics only")
    run.add_argument("--out", default=None, help="output folder (default: none written)")
    run.add_argument("--overwrite", action="store_true", help="replace an earlier run's files")
    run.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    add_distributed_arguments(run)

    sub.add_parser("info", help="device, versions and available paths")

    bench = sub.add_parser("bench", help="throughput benchmarks (ENGINE.md protocol)")
    bench.add_argument("--proteins", default="cln025,2jof,1yrf,1enh,2a3d")
    bench.add_argument("--replicas", default="64", help="comma list: a replica sweep")
    bench.add_argument(
        "--configs", default="baseline",
        help="comma list of presets (baseline, all, all+tables, all+graph, all+tables+graph, "
        "tables+graph) or techniques joined by + (e.g. tabulated_filter+cuda_graph), "
        "each optionally with -fp16 or -bf16 (e.g. all+tables-fp16)",
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
        help="demo (default: the untrained demo model, which keeps each protein near its "
        "native edge count as the protocol wants), shipped, or a model file",
    )
    bench.add_argument("--device", default="auto")
    bench.add_argument("--out", default="artifacts/bench")

    train = sub.add_parser(
        "train", help="train CGSchNet + priors on a structure-based teacher (force matching)"
    )
    train.add_argument("--protein", default="cln025", help="bundled name or PDB file")
    source = train.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data", default=None, help="teacher data file (.pt; its teacher is rebuilt from it)"
    )
    source.add_argument("--generate", action="store_true", help="generate teacher data here")
    train.add_argument(
        "--save-data", default=None,
        help="also save the data here (the frames of --sampler and --compact included)",
    )
    train.add_argument("--epsilon", type=float, default=None, help="teacher ε, kcal/mol")
    train.add_argument("--dihedral-ratio", type=float, default=None)
    train.add_argument(
        "--contact-separation", type=int, default=None,
        help="teacher: smallest residue separation of a native contact (default 3)",
    )
    train.add_argument(
        "--contact-barrier", type=float, default=None,
        help="teacher: desolvation barrier height of every native contact, as a multiple "
        "of ε (default none)",
    )
    train.add_argument(
        "--calibrate", type=float, default=None, metavar="TARGET",
        help="first calibrate ε to this folded fraction at the first temperature",
    )
    train.add_argument("--calibrate-replicas", type=int, default=64)
    train.add_argument("--calibrate-steps", type=int, default=400, help="steps per ε tried")
    train.add_argument("--calibrate-iterations", type=int, default=8)
    train.add_argument(
        "--calibrate-native-fraction", type=float, default=0.5,
        help="share of calibration replicas started native (1 for proteins too large to "
        "refold in a calibration run)",
    )
    train.add_argument("--temperatures", default=None,
                       help="comma list, kelvin (default 300; with --data, the data's own)")
    train.add_argument("--replicas", type=int, default=64, help="per temperature")
    train.add_argument("--steps", type=int, default=100000, help="production steps")
    train.add_argument("--save-every", type=int, default=100)
    train.add_argument("--equilibration", type=int, default=5000)
    train.add_argument("--prior-temperature", type=float, default=None)
    train.add_argument("--prior-grouping", default="term", choices=["term", "type"])
    train.add_argument(
        "--repulsion", default=None, choices=["power", "cutoff", "edge"],
        help="fitted repulsion: (σ/r)^6 at all distances (default), shifted to zero at "
        "1.25 σ, or shifted to zero at σ, the closest approach (nothing wherever the data "
        "went); with --start-from the model's own priors are kept",
    )
    train.add_argument(
        "--repulsion-separation", type=int, default=None,
        help="smallest bond-graph separation of a fitted repulsion pair (default: the "
        "mapping's, 5 for five-bead; 4 also keeps 1-5 pairs apart)",
    )
    train.add_argument(
        "--repulsion-grouping", default=None,
        choices=["pair", "type", "name", "sequence", "touching"],
        help="pairs that share one repulsion σ, their smallest closest approach: each pair "
        "alone (default; far pairs then repel at the closest they came in the data), pairs "
        "of the same bead types (mlcg's), of the same bead names (a sequence-free hard "
        "core), or of the same bead types and residue separation (1-4, 5 and more: helix "
        "neighbours walled at their own closest approach); 'touching' is the last, except "
        "that pairs that came within 6.5 Å keep their own (contacts walled where the data "
        "found them); new priors only",
    )
    train.add_argument(
        "--dihedral-degree", type=int, default=None,
        help="highest harmonic of the fitted dihedral priors (default 3; 1: one minimum "
        "per dihedral, as the teacher's; new priors only)",
    )
    train.add_argument(
        "--refine-priors", action="store_true",
        help="after Boltzmann inversion, refit the bond, angle and dihedral priors to the "
        "teacher's forces by linear least squares, so that SchNet is left the contacts "
        "(new priors only)",
    )
    train.add_argument(
        "--embedding", default=None, choices=["type", "bead"],
        help="SchNet embedding: one vector per bead type (default, the CGSchNet convention) "
        "or one per bead of the chain (pair-specific interactions, as a structure-based "
        "teacher has; the model holds for this sequence only); with --start-from the "
        "model's own is kept",
    )
    train.add_argument("--hidden", type=int, default=128)
    train.add_argument("--filters", type=int, default=128)
    train.add_argument("--blocks", type=int, default=3)
    train.add_argument("--num-rbf", type=int, default=50)
    train.add_argument("--cutoff", type=float, default=10.0, help="Å")
    train.add_argument("--epochs", type=int, default=100)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--patience", type=int, default=10, help="early-stopping epochs")
    train.add_argument(
        "--energy-weight", type=float, default=0.0,
        help="weight of the energy term of the loss, Å²/bead (teacher energies less the "
        "priors', centred per batch; 0: forces alone)",
    )
    train.add_argument(
        "--ensemble-weight", type=float, default=0.0,
        help="with --sampler: weight of the relative-entropy term, (kcal/mol/Å)² per nat: "
        "lowers the energy where the teacher's frames go more often than the sampler's and "
        "raises it where the sampler's go more often (0: off)",
    )
    train.add_argument(
        "--online-walkers", type=int, default=0, metavar="N",
        help="with --ensemble-weight: the term's model frames come from N walkers of the "
        "model being trained, run every --online-every optimiser steps with the weights of "
        "that moment (the reweighting starts afresh at each run), instead of --sampler "
        "frames (0: off)",
    )
    train.add_argument(
        "--online-temperature", type=float, default=None,
        help="kelvin, the walkers' and the teacher frames' they are compared with (default: "
        "the first --validate-temperatures)",
    )
    train.add_argument(
        "--online-start", default=None, metavar="RUN[,RUN...]",
        help="half of the --online-walkers start from these runs' structures, in turn (say, "
        "where the model's run from native went), the others from teacher frames",
    )
    train.add_argument(
        "--online-every", type=int, default=50, help="optimiser steps per walker run"
    )
    train.add_argument("--online-steps", type=int, default=1000, help="MD steps per walker run")
    train.add_argument(
        "--online-save-every", type=int, default=100, help="MD steps between kept walker frames"
    )
    train.add_argument(
        "--online-burn-in", type=int, default=0, metavar="STEPS",
        help="MD steps the walkers run with the starting weights before their first frames "
        "are kept (they relax into the model's own ensemble first)",
    )
    train.add_argument(
        "--online-contrastive", action="store_true",
        help="count the walker frames equally (plain contrastive gradient) instead of "
        "reweighting them to the current weights between runs",
    )
    train.add_argument(
        "--min-sample-fraction", type=float, default=0.5,
        help="with --ensemble-weight: stop once the reweighted sampler frames' effective "
        "sample fraction falls below this, keeping the weights of the last check above it",
    )
    train.add_argument(
        "--ensemble-check-every", type=int, default=50,
        help="with --ensemble-weight: optimiser steps between those checks",
    )
    train.add_argument(
        "--grad-clip", type=float, default=0.0, metavar="NORM",
        help="largest L2 norm of an optimiser step's weight gradient, larger ones scaled "
        "down (0: none; the log's grad_norm column is each epoch's median before clipping)",
    )
    train.add_argument(
        "--weight-average", type=float, default=0.0, metavar="DECAY",
        help="validate, select and keep an exponential moving average of the weights with "
        "this decay per optimiser step, say 0.999 (0: off; not with --sampler's term)",
    )
    train.add_argument(
        "--tf32", action="store_true",
        help="optimiser steps with TF32 matrix products on tensor cores (CUDA); validation "
        "stays FP32, and the card records how far TF32 forces are from FP32 ones",
    )
    train.add_argument(
        "--ensemble-temperatures", default=None, metavar="KELVIN",
        help="with --ensemble-weight: the temperatures (comma list) whose frames feed the "
        "term (default: all); give those at which the teacher's and the sampler's runs both "
        "start from equilibrated structures (--teacher-start, --sampler-start)",
    )
    train.add_argument(
        "--teacher-start", default=None, metavar="RUN",
        help="with --generate: start the teacher's replicas from the structures of a run's "
        "checkpoint (say, a long run of the teacher: its equilibrium) instead of the native "
        "structure",
    )
    train.add_argument(
        "--time-limit", type=float, default=None, help="seconds of training (no new batch after)"
    )
    train.add_argument(
        "--wall-limit", type=float, default=None,
        help="seconds for the data and training of this command: training ends early enough "
        "to save the model (a batch-queue job's limit, say); --validate-steps come on top",
    )
    train.add_argument(
        "--sampler", default=None, metavar="MODEL",
        help="also sample frames with this model's dynamics (say, the model being "
        "continued; with --data, at the data's temperatures) and label them with the "
        "teacher's forces, so training covers the states the model reaches (not used to fit "
        "priors)",
    )
    train.add_argument(
        "--sampler-replicas", type=int, default=None, help="per temperature (default --replicas)"
    )
    train.add_argument(
        "--sampler-steps", type=int, default=None,
        help="production steps of the sampler (default --steps; longer runs reach the states "
        "a model drifts into over nanoseconds)",
    )
    train.add_argument("--sampler-save-every", type=int, default=None, help="default --save-every")
    train.add_argument(
        "--sampler-equilibration", type=int, default=None,
        help="steps the sampler runs before its first frame (default --equilibration); 0 "
        "with a small --sampler-save-every keeps the frames of a model's first picoseconds, "
        "where it leaves the teacher's states for overlapping ones",
    )
    train.add_argument(
        "--sampler-max-force", type=float, default=1000.0, metavar="KCAL_PER_MOL_A",
        help="leave out sampled (and --noise) frames where the teacher's force on a bead "
        "exceeds this (kcal/mol/Å; frames of a sampler that drifted into overlapping beads, "
        "whose forces would swamp the squared error); inf keeps all (default 1000; the "
        "teacher's own frames at 360 K stay below ~100)",
    )
    train.add_argument(
        "--sampler-start", default=None, metavar="RUN[,RUN...]",
        help="start the sampler's replicas from the structures of a run's checkpoint (its "
        "folder or checkpoint.pt; say, a long run of the model that drifted somewhere) "
        "instead of the native structure; with a comma list, from each run's structures "
        "in turn (the ends of every earlier round's run, so that a round keeps covering "
        "the states its predecessors drifted into)",
    )
    train.add_argument(
        "--compact", default=None, metavar="FRACTIONS",
        help="also frames of the teacher squeezed to these fractions of the "
        "native radius of gyration (comma list in (0, 1], say 0.7,0.8), labelled by the plain "
        "teacher: the over-compact states where a network extrapolates into holes (not used "
        "to fit priors)",
    )
    train.add_argument(
        "--cold", default=None, metavar="KELVIN",
        help="also teacher frames at these temperatures (comma list, below the data's) from "
        "the native structure: the ordered near-native states that the teacher's frames at "
        "the data temperatures, started from its equilibrium, do not reach and a model may "
        "hold too low (not used to fit priors or in the relative-entropy term)",
    )
    train.add_argument(
        "--noise", default=None, metavar="ANGSTROMS",
        help="also copies of teacher frames with every coordinate displaced by Gaussian "
        "noise of these standard deviations (comma list, Å, say 0.15,0.3), labelled by the "
        "teacher: unbiased frames just off its ensemble, compressed pairs included, where a "
        "network trained on equilibrium frames alone extrapolates into holes (not used to "
        "fit priors; frames above --sampler-max-force left out)",
    )
    train.add_argument(
        "--noise-fraction", type=float, default=0.1,
        help="share of the teacher's frames copied at each --noise scale (default 0.1)",
    )
    train.add_argument(
        "--cold-replicas", type=int, default=None,
        help="per --cold temperature (default a quarter of --replicas)",
    )
    train.add_argument(
        "--compact-replicas", type=int, default=None,
        help="per temperature and fraction (default an eighth of --replicas)",
    )
    train.add_argument("--compact-steps", type=int, default=None, help="default --steps")
    train.add_argument(
        "--start-from", default=None, metavar="MODEL",
        help="continue training a model of this protein (its weights and priors; its epoch "
        "log is continued): a long training split over several jobs",
    )
    train.add_argument(
        "--select-every", type=int, default=0, metavar="EPOCHS",
        help="every this many epochs (and at the last) run the model for --select-steps and "
        "keep the weights whose run is closest to the teacher's (--select-by), instead of "
        "those with the lowest validation force error (0: off)",
    )
    train.add_argument(
        "--select-by", default="folded", choices=["folded", "ensemble"],
        help="folded: the folded fraction; ensemble: the worse of the long-run validation's "
        "criteria, the folded fraction (within 0.1) and the Q histogram overlap (at least "
        "0.8), each as a share of its limit",
    )
    train.add_argument(
        "--select-steps", type=int, default=25_000,
        help="steps of each --select-every run (half of the replicas from native, half from "
        "unfolded structures or --select-start; Q over its second half)",
    )
    train.add_argument("--select-replicas", type=int, default=64)
    train.add_argument(
        "--select-start", metavar="RUN",
        help="start the second half of each --select-every run from this run's checkpoint "
        "(say, a model run that drifted into a state of its own), not from unfolded structures",
    )
    train.add_argument("--val-fraction", type=float, default=0.1)
    train.add_argument("--validate-steps", type=int, default=0, help="0: no MD validation")
    train.add_argument("--validate-replicas", type=int, default=32)
    train.add_argument("--validate-temperatures", default="300")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="auto", help="auto, cpu or cuda")
    train.add_argument("--out", required=True, help="output folder")
    train.add_argument("--quiet", action="store_true", help="no progress bars")

    validate = sub.add_parser(
        "validate", help="MD validation of a trained model against its teacher (into its card)"
    )
    validate.add_argument("--model", required=True, help="model written by workbench train")
    validate.add_argument("--temperatures", default="300", help="comma list, kelvin")
    validate.add_argument("--replicas", type=int, default=64, help="per temperature")
    validate.add_argument("--steps", type=int, default=10000)
    validate.add_argument("--seed", type=int, default=0)
    validate.add_argument("--device", default="auto", help="auto, cpu or cuda")
    validate.add_argument(
        "--runs", nargs=2, default=None, metavar=("MODEL_RUN", "TEACHER_RUN"),
        help="instead of new MD: compare two run folders already made (`workbench run` with "
        "the model and with --model teacher) and record it as the card's long run",
    )
    validate.add_argument(
        "--plot", default=None, metavar="PNG",
        help="with --runs: where the long runs' plot goes (default: beside the model, "
        "MODEL.long_run.png)",
    )
    scales = sub.add_parser(
        "fit-scales",
        help="fit energy scales of a model's terms to its teacher's ensemble (relative entropy)",
    )
    scales.add_argument("--model", required=True, help="model written by workbench train")
    scales.add_argument(
        "--teacher-start", required=True, metavar="RUN",
        help="a long `workbench run --model teacher` folder at --temperature: its final "
        "structures start the teacher's sample and every model sample",
    )
    scales.add_argument(
        "--model-start", default=None, metavar="RUN",
        help="a long run of the model: its final structures start the first model sample "
        "(default: --teacher-start's); each later sample starts where the one before ended",
    )
    scales.add_argument("--terms", default="schnet",
                        help="comma list of the terms to scale: schnet and/or prior names")
    scales.add_argument("--temperature", type=float, default=300.0)
    scales.add_argument("--replicas", type=int, default=None,
                        help="how many of the run's structures (default all)")
    scales.add_argument("--iterations", type=int, default=4, help="model samples")
    scales.add_argument("--time", type=float, default=100.0, help="ps per sample")
    scales.add_argument("--discard", type=float, default=25.0,
                        help="ps left out at each sample's start")
    scales.add_argument("--every", type=float, default=1.0, help="ps between frames")
    scales.add_argument("--max-step", type=float, default=0.1,
                        help="longest step in log-scale per iteration")
    scales.add_argument("--dt", type=float, default=4.0, help="time step, fs")
    scales.add_argument("--seed", type=int, default=0)
    scales.add_argument("--device", default="auto", help="auto, cpu or cuda")
    scales.add_argument("--out", required=True,
                        help="where the scaled model goes (its card beside it)")
    scales.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    return parser


def _settings(args) -> RunSettings:
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
        structures=args.structures,
        mapping=args.mapping,
        options=kernel_options(args.kernels, args.mlp_precision),
        neighbors=NeighborSettings(skin=args.skin, exclude_bonded=args.exclude_bonded),
        denatured_fraction=args.denatured_fraction,
        denature_steps=args.denature_steps,
    )


def _prepare_output(args, resume_from: str = "checkpoint.pt") -> Path | None:
    """The output folder (or None), refusing to overwrite; ``resume_from`` must exist in it
    for --resume."""
    if args.out is None:
        if args.resume:
            raise UsageError("--resume needs --out, the folder of the run to continue")
        return None
    out = ensure_writable_folder(args.out)
    earlier = existing_run_files(out)
    if earlier and not (args.overwrite or args.resume):
        names = ", ".join(p.name for p in earlier)
        raise UsageError(
            f"{out} already holds a run ({names}); pass --overwrite to replace it or "
            "--resume to continue it"
        )
    if args.resume and not (out / resume_from).exists():
        raise UsageError(f"--resume: no {resume_from} in {out}")
    return out


def _check_ladder_files(args, out: Path) -> None:
    """--resume needs --ladder exactly when the run in ``out`` had one."""
    had_ladder = (out / "tempering.pt").is_file()
    if args.ladder and not had_ladder:
        raise UsageError(f"--resume --ladder: no tempering.pt in {out} (a run without a ladder)")
    if not args.ladder and had_ladder:
        raise UsageError(f"{out} holds a run with a temperature ladder: pass its --ladder")


def acceptance_text(acceptance: dict[str, float | None]) -> str:
    """``"300–346 K 42%, 346–400 K 40%"`` from a ``summary()["acceptance"]`` dict."""
    return ", ".join(
        f"{pair} {'n/a' if rate is None else f'{rate:.0%}'}" for pair, rate in acceptance.items()
    )


def _summary_table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 3 + max(len(v) for _, v in rows))
    return "\n".join([line, *(f"{k:<{width}} | {v}" for k, v in rows), line])


def cmd_run(args) -> int:
    began = time.perf_counter()
    settings = _settings(args)
    settings.validate()
    if wants_distributed(args):
        return run_distributed(args, settings)
    out = _prepare_output(args)
    if out is not None and args.resume:
        _check_ladder_files(args, out)
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
    print(
        f"{prepared.system.name}: {prepared.system.n_beads} beads, {settings.replicas} replicas, "
        f"{temperature}, dt {settings.timestep_fs:g} fs on {sim.device}; "
        f"kernels: {', '.join(settings.options.enabled()) or 'baseline (PyTorch)'}"
    )
    metrics_reporter = traj_reporter = None
    if out is not None:
        if args.resume:
            sim.load_checkpoint(out / "checkpoint.pt")
            if tempering is not None:
                tempering.load(out / "tempering.pt")
            print(f"resumed from step {sim.step_count}")
        if tempering is not None:
            tempering.open_log(out / "exchanges.csv", append=args.resume)
        elif not args.resume:  # an overwritten ladder run must not leave its files behind
            for name in TEMPERING_FILES:
                (out / name).unlink(missing_ok=True)
        metrics_reporter = MetricsReporter(
            out / "metrics.csv", settings.save_interval, append=args.resume
        )
        sim.reporters.append(metrics_reporter)
        if not args.no_trajectory:
            traj_reporter = TrajectoryReporter(
                out / "trajectory", prepared.system, settings.replicas,
                settings.save_interval, args.format, append=args.resume,
            )
            sim.reporters.append(traj_reporter)

    from tqdm import tqdm

    meter = ThroughputMeter(settings.replicas, settings.timestep_fs, sim.device)
    setup_s = time.perf_counter() - began  # system, model, tables, checkpoint, files
    chunk = settings.save_interval
    bar = tqdm(total=settings.steps, unit="step", disable=args.quiet, dynamic_ncols=True)
    done = 0
    interrupted = False
    saved_step = sim.step_count  # the step the checkpoint on disk holds
    try:
        while done < settings.steps:
            n = min(chunk, settings.steps - done)
            timed_steps(sim, meter, n, prepared.advance)
            done += n
            q = float(sim.metrics()["q"].mean())
            rate = meter.timestep_mol_per_s()
            bar.set_postfix_str(
                f"{rate / settings.replicas:.1f} steps/s | {rate:,.0f} timestep·mol/s | "
                f"{meter.ns_per_day():,.1f} ns/day | Q {q:.3f}"
            )
            bar.update(n)
            if out is not None:
                sim.save_checkpoint(out / "checkpoint.pt")
                if tempering is not None:
                    tempering.save(out / "tempering.pt")
                saved_step = sim.step_count
    except KeyboardInterrupt:
        # Ctrl-C (or SIGINT from a time limit): stop cleanly. The checkpoint and the
        # metrics of the last completed save are on disk; --resume continues from there.
        interrupted = True
    finally:
        bar.close()
        if tempering is not None:
            tempering.close()
        for reporter in (metrics_reporter, traj_reporter):
            if reporter is not None:
                reporter.close()

    metrics = {k: v.detach().float().cpu() for k, v in sim.metrics().items()}
    live = ~metrics["frozen"].bool()
    has_q = bool(live.any()) and not bool(torch.isnan(metrics["q"]).all())
    q, r = metrics["q"], metrics["rmsd"]
    frozen = sim.frozen_report()
    peak = meter.peak_memory_gb()
    folded_q = state_thresholds(prepared.system.name)[0]
    summary = {
        "protein": prepared.system.name,
        "beads": prepared.system.n_beads,
        "replicas": settings.replicas,
        "steps": sim.step_count,
        "device": str(sim.device),
        "gpu": torch.cuda.get_device_name(sim.device) if sim.device.type == "cuda" else None,
        "kernels": settings.options.to_dict(),
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
        "interrupted": interrupted,
    }
    files = []
    if out is not None:
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
        files = ["metrics.csv", "checkpoint.pt", "summary.json"]
        if tempering is not None:
            files += list(TEMPERING_FILES)
        if traj_reporter is not None:
            count = len(traj_reporter.paths)
            files.append(f"trajectory/ ({count} × .{args.format} + topology.pdb)")
    rows = [
        ("throughput", f"{summary['timestep_mol_per_s']:,.1f} timestep·mol/s"),
        ("", f"{summary['ns_per_day']:,.2f} ns/day (all replicas)"),
        ("start-up", f"{setup_s:.1f} s before the first step" + (
            "" if summary["warmup_overhead_s"] is None
            else f", then {summary['warmup_overhead_s']:.1f} s more in the first {chunk} steps "
            "than at the later rate (compilation, graph capture)")),
        ("peak memory", "n/a (CPU)" if peak is None else f"{peak:.2f} GB"),
        ("RMSD (CA)", f"{summary['rmsd_mean']:.2f} Å mean" if live.any() else "n/a"),
        ("Q", f"{summary['q_mean']:.3f} mean" if has_q else "n/a (no native contacts)"),
        (f"folded (Q > {folded_q:g})", f"{summary['folded_fraction']:.0%}" if has_q else "n/a"),
        ("frozen replicas", ", ".join(f"{i}@step {s}" for i, s in frozen) or "none"),
        ("files", (f"{out}: " + ", ".join(files)) if out else "none (no --out)"),
    ]
    if tempering is not None:
        acceptance = acceptance_text(summary["tempering"]["acceptance"])
        rows.insert(-2, ("exchange acceptance", acceptance))
    print(_summary_table(rows))
    if interrupted:
        if out is None:
            resume = ""
        elif (out / "checkpoint.pt").exists():
            resume = f"; --resume continues from step {saved_step}"
        else:
            resume = "; no checkpoint was saved yet"
        print(f"interrupted at step {sim.step_count}{resume}", file=sys.stderr)
        return 130
    return 0


def _version(module: str) -> str:
    try:
        mod = __import__(module)
    except ImportError:
        return "not installed"
    return getattr(mod, "__version__", "installed")


def cmd_info(args) -> int:
    from kernels import triton_available

    cuda = torch.cuda.is_available()
    rows = [
        ("python", platform.python_version()),
        ("torch", torch.__version__),
        ("triton", _version("triton")),
        ("numpy", _version("numpy")),
        ("mdtraj", _version("mdtraj")),
        ("device", torch.cuda.get_device_name(0) if cuda else "CPU only (no CUDA GPU found)"),
        ("reference path", "available (PyTorch)"),
        ("fused Triton path", "available" if triton_available() else "unavailable (needs a GPU)"),
    ]
    print(_summary_table(rows))
    return 0


def bench_options(name: str) -> KernelOptions:
    """Kernel options of a benchmark configuration name (``preset[-precision]``)."""
    base, _, precision = name.rpartition("-")
    if precision in PRECISIONS and base:
        return kernel_options(base, precision)
    return kernel_options(name, "fp32")


def cmd_bench(args) -> int:
    from workbench.benchmark import BenchCase, markdown_table, run_case, write_results

    proteins = [p.strip() for p in args.proteins.split(",") if p.strip()]
    replicas = [int(r) for r in args.replicas.split(",") if r.strip()]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    cases = [
        BenchCase(p, r, c, bench_options(c), None if args.model == "shipped" else args.model)
        for p in proteins for r in replicas for c in configs
    ]
    records = []
    failures = 0
    for case in cases:
        try:
            record = run_case(
                case, args.device, args.steps, args.warmup, args.repeats, args.breakdown,
                profile=args.profile, launches=args.launches,
            )
        except torch.cuda.OutOfMemoryError:
            print(f"{case.protein} × {case.replicas} {case.label}: out of memory", flush=True)
            torch.cuda.empty_cache()
            continue
        except Exception as exc:  # noqa: BLE001 - one failing case must not end the table
            print(f"{case.protein} × {case.replicas} {case.label}: failed: {exc!r}", flush=True)
            failures += 1
            continue
        records.append(record)
        print(
            f"{record['protein']} × {record['replicas']} {record['label']}: "
            f"{record['timestep_mol_per_s']:,.0f} timestep·mol/s"
            + (f", breakdown {record['breakdown']}" if "breakdown" in record else ""),
            flush=True,
        )
        if "profile" in record:
            print(record.pop("profile"), flush=True)
    command = "workbench " + " ".join(sys.argv[1:]) if sys.argv[1:] else "workbench bench"
    json_path, md_path = write_results(records, args.out, command)
    print(markdown_table(records))
    print(f"wrote {json_path} and {md_path}")
    return 1 if failures else 0


def _extra_frames_held(origin: dict) -> set[str]:
    """Which extra frames (``noise``, ``compaction``, ``cold``) a saved data set holds, by
    its ``origin`` record, through the saved data sets it was made from."""
    held = {kind for kind in ("noise", "compaction", "cold") if kind in origin}
    earlier = origin.get("saved_data")
    return held | (_extra_frames_held(earlier) if isinstance(earlier, dict) else set())


def _floats(text: str) -> list[float]:
    return [float(t) for t in text.split(",") if t.strip()]


def _appended(data: dict, extra: dict, sampler) -> dict:
    """``data`` with the frames of ``extra`` after its own; a ``sampler``'s frame mask
    (the relative-entropy term's frames) grows by as many False entries."""
    from workbench.training.data import concatenate_data

    if sampler is not None:
        sampler.mask = torch.cat([
            sampler.mask, torch.zeros(extra["temperature"].shape[0], dtype=torch.bool)
        ])
    return concatenate_data(data, extra)


def cmd_train(args) -> int:
    from workbench.md.simulation import checkpoint_positions, pooled_checkpoint_positions
    from workbench.model.io import load_potential
    from workbench.model.schnet import SchNetConfig
    from workbench.runner import resolve_device
    from workbench.system import build_system
    from workbench.teacher import calibrate_epsilon, teacher_potential
    from workbench.training.compaction import SQUEEZE_STRENGTH, compacted_frames
    from workbench.training.data import (
        concatenate_data,
        data_temperatures,
        generate_teacher_data,
        load_teacher_data,
        save_teacher_data,
        without_violent_frames,
    )
    from workbench.training.force_matching import FitSettings
    from workbench.training.online_ensemble import OnlineSettings
    from workbench.training.perturbation import displaced_frames
    from workbench.training.pipeline import TrainSettings, train_potential
    from workbench.training.relative_entropy import SamplerFrames

    began = time.monotonic()
    if args.sampler_start is not None and args.sampler is None:
        raise UsageError("--sampler-start gives the --sampler's starting structures: add --sampler")
    if args.teacher_start is not None and args.data is not None:
        raise UsageError("--teacher-start starts new teacher runs: use it with --generate")
    if args.select_start is not None and args.select_every <= 0:
        raise UsageError("--select-start gives the --select-every runs' starting structures: "
                         "add --select-every")
    if args.ensemble_weight > 0 and args.sampler is None and args.online_walkers <= 0:
        raise UsageError("--ensemble-weight compares the teacher's frames with a model's: add "
                         "--sampler or --online-walkers")
    if args.sampler_equilibration is not None and args.sampler_equilibration < 0:
        raise UsageError(f"--sampler-equilibration must be >= 0, got {args.sampler_equilibration}")
    if not args.sampler_max_force > 0:
        raise UsageError(f"--sampler-max-force must be positive, got {args.sampler_max_force}")
    if not (args.grad_clip >= 0 and math.isfinite(args.grad_clip)):
        raise UsageError(f"--grad-clip must be a finite norm >= 0, got {args.grad_clip}")
    if not 0.0 <= args.weight_average < 1.0:
        raise UsageError(f"--weight-average must lie in [0, 1), got {args.weight_average}")
    if args.weight_average > 0 and args.ensemble_weight > 0 and args.online_walkers <= 0:
        raise UsageError("--weight-average goes with --online-walkers, not with --sampler's "
                         "term (its reweighting check restores raw weights)")
    if args.online_walkers > 0 and args.ensemble_weight <= 0:
        raise UsageError("--online-walkers feeds the relative-entropy term: add --ensemble-weight")
    if args.online_start is not None and args.online_walkers <= 0:
        raise UsageError("--online-start gives the walkers' starting structures: add "
                         "--online-walkers")
    online = None
    if args.online_walkers > 0:
        try:
            online = OnlineSettings(
                walkers=args.online_walkers,
                temperature=args.online_temperature or _floats(args.validate_temperatures)[0],
                refresh_every=args.online_every, steps=args.online_steps,
                save_every=args.online_save_every, burn_in=args.online_burn_in,
                contrastive=args.online_contrastive,
            )
        except ValueError as error:
            raise UsageError(str(error)) from None
    if args.dihedral_degree is not None and args.dihedral_degree < 1:
        raise UsageError(f"--dihedral-degree must be at least 1, got {args.dihedral_degree}")
    cold = None if args.cold is None else _floats(args.cold)
    if cold is not None and not all(t > 0 for t in cold):
        raise UsageError(f"--cold temperatures must be positive, got {args.cold}")
    compact = None if args.compact is None else _floats(args.compact)
    if compact is not None and not all(0.0 < f <= 1.0 for f in compact):
        raise UsageError(f"--compact fractions must lie in (0, 1], got {args.compact}")
    noise = None if args.noise is None else _floats(args.noise)
    if noise is not None and not all(s > 0.0 and math.isfinite(s) for s in noise):
        raise UsageError(f"--noise scales must be positive Å, got {args.noise}")
    if not 0.0 < args.noise_fraction <= 1.0:
        raise UsageError(f"--noise-fraction must lie in (0, 1], got {args.noise_fraction}")
    device, notice = resolve_device(args.device)
    if notice:
        print(f"NOTE: {notice}")
    system = build_system(args.protein)
    temperatures = _floats(args.temperatures or "300")
    # starting structures are read before the output folder is made (a bad path leaves none);
    # the selection runs' are only checked here and read again by train_potential
    teacher_starts, _ = (
        None if run is None else checkpoint_positions(run, system)
        for run in (args.teacher_start, args.select_start)
    )
    sampler_starts, online_starts = (
        None if runs is None else pooled_checkpoint_positions(
            [run for run in runs.split(",") if run.strip()], system
        )
        for runs in (args.sampler_start, args.online_start)
    )
    saved = None if args.data is None else load_teacher_data(args.data)
    if saved is not None:
        # the same seed would add the very same frames again, each then counted twice
        held = _extra_frames_held(saved[1].get("origin", {}))
        requested = {"noise": ("--noise", noise), "compaction": ("--compact", compact),
                     "cold": ("--cold", cold)}
        for kind, (option, given) in requested.items():
            if given is not None and kind in held:
                raise UsageError(f"{args.data} already holds the frames of {option} (added "
                                 f"when it was saved): leave out {option}, or they count twice")
    out = ensure_writable_folder(args.out)
    origin: dict = {}
    sampler = None
    if saved is not None:
        data, metadata = saved
        teacher = teacher_potential(system, metadata["epsilon"], metadata["dihedral_ratio"],
                                    metadata.get("contact_separation"),
                                    metadata.get("contact_barrier"))
        if args.temperatures is None:  # frames added below: at the data's own temperatures
            temperatures = data_temperatures(data)
        origin["saved_data"] = {"file": args.data, **metadata.get("origin", {})}
    else:
        epsilon = args.epsilon
        if args.calibrate is not None:
            calibration = calibrate_epsilon(
                system, temperatures[0], args.calibrate, device=device, seed=args.seed,
                dihedral_ratio=args.dihedral_ratio, replicas=args.calibrate_replicas,
                steps=args.calibrate_steps, iterations=args.calibrate_iterations,
                native_fraction=args.calibrate_native_fraction,
                contact_separation=args.contact_separation,
                contact_barrier=args.contact_barrier,
                folded_q=state_thresholds(system.name)[0],
            )
            epsilon = calibration.epsilon
            print(f"calibrated ε = {epsilon:.4f} kcal/mol (ε, folded: {calibration.history})")
        teacher = teacher_potential(system, epsilon, args.dihedral_ratio,
                                    args.contact_separation, args.contact_barrier)
        data = generate_teacher_data(
            system, teacher, temperatures, args.replicas, args.steps, args.save_every,
            device, args.seed, args.equilibration, progress=not args.quiet,
            starts=teacher_starts,
        )
        if args.teacher_start is not None:
            origin["teacher_start"] = args.teacher_start
    if args.sampler is not None:
        sampler_potential = load_potential(args.sampler)
        sampled = generate_teacher_data(
            system, teacher, temperatures, args.sampler_replicas or args.replicas,
            args.sampler_steps or args.steps, args.sampler_save_every or args.save_every,
            device, args.seed,
            args.equilibration if args.sampler_equilibration is None
            else args.sampler_equilibration,
            progress=not args.quiet, sampler=sampler_potential, starts=sampler_starts,
        )
        sampled, violent = without_violent_frames(sampled, args.sampler_max_force)
        if violent:
            print(f"{violent} of {violent + sampled['temperature'].shape[0]} sampled frames "
                  f"left out: a teacher force above {args.sampler_max_force:g} kcal/mol/Å")
        if sampled["temperature"].shape[0] == 0:
            raise UsageError(
                f"every sampled frame has a teacher force above {args.sampler_max_force:g} "
                "kcal/mol/Å: the sampler's structures overlap; start it elsewhere "
                "(--sampler-start) or raise --sampler-max-force"
            )
        # the ensemble term compares this sampler's frames only (frames of an earlier
        # sampler in --data stay marked ``sampled``, apart from the teacher's own)
        mask = torch.zeros(data["temperature"].shape[0] + sampled["temperature"].shape[0],
                           dtype=torch.bool)
        mask[data["temperature"].shape[0]:] = True
        data = concatenate_data(data, sampled)
        sampler = SamplerFrames(sampler_potential.cpu(), mask)
        origin["sampler"] = {"model": args.sampler, "start": args.sampler_start,
                             "frames": int(sampled["temperature"].shape[0]),
                             "left_out": violent, "max_force": args.sampler_max_force}
    if cold is not None:
        chilled = generate_teacher_data(
            system, teacher, cold, args.cold_replicas or max(1, args.replicas // 4), args.steps,
            args.save_every, device, args.seed, args.equilibration, progress=not args.quiet,
        )
        # marked like a sampler's frames: off the data temperatures' equilibrium, so kept
        # out of the prior fit
        chilled["sampled"] = torch.ones(chilled["temperature"].shape[0], dtype=torch.bool)
        data = _appended(data, chilled, sampler)
        origin["cold"] = {"temperatures_K": cold, "start": "native",
                          "frames": int(chilled["temperature"].shape[0])}
    if compact is not None:
        squeezed = compacted_frames(
            system, teacher, compact, temperatures,
            args.compact_replicas or max(1, args.replicas // 8),
            args.compact_steps or args.steps, args.save_every, device=device,
            seed=args.seed, equilibration=args.equilibration, progress=not args.quiet,
        )
        data = _appended(data, squeezed, sampler)
        origin["compaction"] = {
            "radius_of_gyration_fractions": compact, "strength_kcal_per_A2": SQUEEZE_STRENGTH,
            "frames": int(squeezed["temperature"].shape[0]),
        }
    if noise is not None:
        displaced, violent = without_violent_frames(
            displaced_frames(teacher, data, noise, args.noise_fraction, args.seed, device),
            args.sampler_max_force,
        )
        if violent:
            print(f"{violent} of {violent + displaced['temperature'].shape[0]} displaced "
                  f"frames left out: a teacher force above {args.sampler_max_force:g} "
                  "kcal/mol/Å")
        data = _appended(data, displaced, sampler)
        origin["noise"] = {"scales_A": noise, "fraction": args.noise_fraction,
                           "frames": int(displaced["temperature"].shape[0]),
                           "left_out": violent, "max_force": args.sampler_max_force}
    if args.save_data:
        save_teacher_data(data, args.save_data, {**teacher.metadata, "origin": origin})
    deadline = None
    if args.wall_limit is not None:
        # training ends by then, whatever it still has to prepare: a tenth of the command's
        # time is kept for the last validation and saving the model
        deadline = began + 0.9 * args.wall_limit
        print(f"training ends {max(deadline - time.monotonic(), 0.0):.0f} s from now "
              f"(wall limit)")
    settings = TrainSettings(
        schnet=SchNetConfig(
            hidden=args.hidden, filters=args.filters, blocks=args.blocks,
            num_rbf=args.num_rbf, cutoff=args.cutoff,
        ),
        fit=FitSettings(
            epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.lr,
            patience=args.patience, seed=args.seed, device=str(device),
            time_limit=args.time_limit, deadline=deadline, select_every=args.select_every,
            energy_weight=args.energy_weight, ensemble_weight=args.ensemble_weight,
            min_sample_fraction=args.min_sample_fraction,
            ensemble_check_every=args.ensemble_check_every, tf32=args.tf32,
            grad_clip=args.grad_clip, weight_average=args.weight_average,
        ),
        validation_fraction=args.val_fraction,
        prior_temperature=args.prior_temperature,
        prior_grouping=args.prior_grouping,
        prior_repulsion=args.repulsion,
        prior_repulsion_separation=args.repulsion_separation,
        prior_dihedral_degree=args.dihedral_degree,
        prior_repulsion_grouping=args.repulsion_grouping,
        prior_refinement=args.refine_priors,
        embedding=args.embedding,
        validate_steps=args.validate_steps,
        validate_replicas=args.validate_replicas,
        validate_temperatures=_floats(args.validate_temperatures),
        progress=not args.quiet,
        start_from=args.start_from,
        select_steps=args.select_steps,
        select_replicas=args.select_replicas,
        select_by=args.select_by,
        select_start=args.select_start,
        data_origin=origin,
        ensemble_temperatures=None if args.ensemble_temperatures is None
        else _floats(args.ensemble_temperatures),
        online=online,
        online_starts=online_starts,
    )
    _, card = train_potential(system, teacher, data, settings, out, sampler)
    training = card["training"]
    rows = [
        ("teacher ε", f"{card['teacher']['epsilon']:g} kcal/mol"),
        ("frames", f"{card['data']['frames']} ({card['data']['frames_sampled_by_a_model']} "
                   "from --sampler, --compact, --cold or --noise)"),
        ("epochs", f"{training['epochs_run']} (best {training['best_epoch']})"),
        ("val force RMSE", f"{training['val_force_rmse']:.4f} kcal/mol/Å"),
        ("val energy RMSE", f"{training['val_energy_rmse']:.3f} kcal/mol (centred)"),
    ]
    walkers = training.get("relative_entropy", {}).get("walkers")
    if walkers is not None and walkers["last_walker_state"] is not None:
        last = walkers["last_walker_state"]
        rows.append(("walkers", f"{walkers['refreshes']} runs ({walkers['seconds']:.0f} s), "
                                f"last: Q {last['q_mean']:.3f}, "
                                f"folded {last['folded']:.2f}, {walkers['walkers_restarted']} "
                                "restarted"))
    if training["tf32_force_error"] is not None:
        rows.append(("TF32 steps", f"forces {training['tf32_force_error']:.1e} relative RMS "
                                   "from FP32 (first validation batch)"))
    rows += [
        ("files", f"{out}: {system.name}.pt, {system.name}.json, {system.name}.log.csv"),
    ]
    print(_summary_table(rows))
    return 0


def model_and_teacher(path: str):
    """A trained model file's potential, its system and the teacher it was trained on."""
    from workbench.model.io import load_potential
    from workbench.system import build_system
    from workbench.teacher import teacher_potential

    potential = load_potential(path)
    teacher_meta = potential.metadata.get("teacher")
    if not isinstance(teacher_meta, dict) or "epsilon" not in teacher_meta:
        raise UsageError(f"{path} has no teacher in its metadata (not made by train)")
    system = build_system(potential.metadata["protein"])
    teacher = teacher_potential(system, teacher_meta["epsilon"], teacher_meta.get("dihedral_ratio"),
                                teacher_meta.get("contact_separation"),
                                teacher_meta.get("contact_barrier"))
    return potential, system, teacher


def cmd_validate(args) -> int:
    from workbench.runner import resolve_device
    from workbench.training.model_card import card_path, read_model_card, write_model_card
    from workbench.training.validate import validate_against_teacher

    potential, system, teacher = model_and_teacher(args.model)
    if args.runs is not None:
        return _validate_long_run(
            Path(args.model), *args.runs, state_thresholds(system.name), plot=args.plot,
            ends=(system, potential, teacher),
        )
    device, notice = resolve_device(args.device)
    if notice:
        print(f"NOTE: {notice}")
    model = Path(args.model)
    stem = model.with_suffix("")
    validation = validate_against_teacher(
        system, teacher, potential, _floats(args.temperatures), args.replicas, args.steps,
        max(1, args.steps // 1000), device, args.seed,
        plot_path=f"{stem}.validation.png", series_path=f"{stem}.validation.pt",
    )
    card = read_model_card(model)
    previous = card.get("validation") or {}
    # kept: the force error on held-out teacher frames (training) and a long run
    for key in ("force_rmse", "long_run"):
        if key in previous:
            validation[key] = previous[key]
    card["validation"] = validation
    write_model_card(card, model)
    rows = []
    for temperature, result in zip(validation["temperatures"], validation["results"], strict=True):
        verdict = "pass" if all(result["passes"].values()) else "FAIL"
        rows.append((
            f"{temperature:g} K",
            f"Q overlap {result['q_intersection']:.2f}, folded teacher/model "
            f"{result['folded_teacher']:.2f}/{result['folded_model']:.2f}, events (fold, unfold) "
            f"teacher {tuple(result['events_teacher'])} model {tuple(result['events_model'])}: "
            f"{verdict}",
        ))
    rows.append(("card", str(card_path(model))))
    print(_summary_table(rows))
    return 0


def _validate_long_run(
    model: Path, model_run: str, teacher_run: str, states: tuple[float, float],
    plot: str | None = None, ends=None,
) -> int:
    """``validate --runs``: the two runs' comparison into the card as ``long_run``, states
    counted with the Q thresholds ``states`` (folded, unfolded); with ``ends = (system,
    model potential, teacher)`` and both runs' checkpoints, also the two potentials at the
    runs' final structures (``long_run["end_structures"]``)."""
    from workbench.md.simulation import checkpoint_positions
    from workbench.training.model_card import card_path, read_model_card, write_model_card
    from workbench.training.validate import (
        compare_end_structures,
        compare_runs,
        metrics_file,
        plot_long_runs,
    )

    try:
        files = [metrics_file(folder) for folder in (model_run, teacher_run)]
    except FileNotFoundError as error:
        raise UsageError(f"--runs: {error}") from None
    long_run = compare_runs(*files, states=states)
    plot = Path(plot) if plot is not None else model.with_suffix(".long_run.png")
    if plot_long_runs({"model": files[0]}, files[1], plot, states):
        long_run["plot"] = str(plot)
    checkpoints = [Path(folder) / "checkpoint.pt" for folder in (model_run, teacher_run)]
    if ends is not None and all(file.is_file() for file in checkpoints):
        system, potential, teacher = ends
        long_run["end_structures"] = compare_end_structures(
            system, potential, teacher,
            *(checkpoint_positions(file, system) for file in checkpoints),
        )
    card = read_model_card(model)
    card["validation"] = {**(card.get("validation") or {}), "long_run": long_run}
    write_model_card(card, model)
    failed = [name for name, ok in long_run["passes"].items() if not ok]
    rows = [
        ("long run", f"{long_run['replicas']} replicas × {long_run['time_ps']:,.0f} ps"),
        ("Q overlap", f"{long_run['q_intersection']:.2f}"),
        ("folded", f"teacher {long_run['folded_teacher']:.2f}, "
                   f"model {long_run['folded_model']:.2f} (Q > {states[0]:g})"),
        ("events", f"teacher {tuple(long_run['events_teacher'])}, "
                   f"model {tuple(long_run['events_model'])} (fold, unfold; Q "
                   f"{states[0]:g} / {states[1]:g})"),
        ("verdict", "pass" if not failed else f"FAIL ({', '.join(failed)})"),
    ]
    if "end_structures" in long_run:
        ends = long_run["end_structures"]
        rows.append((
            "end structures",
            f"model − teacher energy at the model run's, relative to the teacher run's: "
            f"{ends['energy_gap']:+.1f} ± {ends['energy_gap_std']:.1f} kcal/mol (spread at "
            f"the teacher's {ends['teacher_spread']:.1f}); force RMSE "
            f"{ends['force_rmse_model_run']:.2f} / {ends['force_rmse_teacher_run']:.2f}",
        ))
        rows.append((
            "teacher terms",
            "at the model run's / the teacher run's ends, kcal/mol: " + ", ".join(
                f"{key} {value:.0f} / {ends['teacher_terms_teacher_run'][key]:.0f}"
                for key, value in ends["teacher_terms_model_run"].items()
            ),
        ))
        rows.append((
            "flipped dihedrals",
            f"more than 90° from native at the model run's / the teacher run's ends: "
            f"{ends['flipped_dihedrals_model_run']:.1%} / "
            f"{ends['flipped_dihedrals_teacher_run']:.1%}",
        ))
    rows += [
        ("plot", long_run.get("plot", "none (matplotlib is not installed)")),
        ("card", str(card_path(model))),
    ]
    print(_summary_table(rows))
    return 0


def cmd_fit_scales(args) -> int:
    from workbench.md.simulation import checkpoint_positions
    from workbench.model.io import save_potential
    from workbench.runner import resolve_device
    from workbench.training.energy_scales import fit_energy_scales, sample_frames, scale_terms
    from workbench.training.model_card import card_path, read_model_card, write_model_card

    out = Path(args.out)
    if out.resolve() == Path(args.model).resolve():
        raise UsageError("--out must differ from --model (the scaled model is a new file)")
    if out.exists() and not args.overwrite:
        raise UsageError(f"{out} exists; pass --overwrite to replace it")
    if not out.parent.is_dir():
        raise UsageError(f"--out: no folder {out.parent}")
    for name in ("time", "every", "dt", "max_step"):
        if not getattr(args, name) > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got "
                             f"{getattr(args, name)}")
    if not 0 <= args.discard < args.time:
        raise UsageError(f"--discard must lie in [0, --time), got {args.discard}")
    names = [t.strip() for t in args.terms.split(",") if t.strip()]
    potential, system, teacher = model_and_teacher(args.model)
    scale_terms(potential, dict.fromkeys(names, 1.0))  # refuses terms it cannot scale now
    starts = checkpoint_positions(Path(args.teacher_start) / "checkpoint.pt", system)
    model_starts = starts if args.model_start is None else checkpoint_positions(
        Path(args.model_start) / "checkpoint.pt", system)
    if args.replicas is not None:
        if args.replicas < 1:
            raise UsageError(f"--replicas must be at least 1, got {args.replicas}")
        starts, model_starts = starts[: args.replicas], model_starts[: args.replicas]
    device, notice = resolve_device(args.device)
    if notice:
        print(f"NOTE: {notice}")
    steps, every = (max(1, round(t * 1000.0 / args.dt)) for t in (args.time, args.every))
    discard = round(args.discard * 1000.0 / args.dt)
    teacher_sample = sample_frames(system, teacher, starts, args.temperature, steps, discard,
                                   every, device, args.seed, args.dt)
    print(f"teacher: {teacher_sample.positions.shape[0]} frames, Q mean "
          f"{float(teacher_sample.q.mean()):.3f}", flush=True)

    def report(row: dict) -> None:
        scales = ", ".join(f"{k} {v:.3f}" for k, v in row["scales"].items())
        gradient = ", ".join(f"{v:+.2f}" for v in row["gradient"].values())
        print(f"iteration {row['iteration']}: scales {scales}; Q mean {row['q_mean']:.3f}, "
              f"folded {row['folded_fraction']:.2f}, Q overlap {row['q_intersection']:.2f}, "
              f"flipped dihedrals {row['flipped_dihedrals']:.1%}; dS/dlog s {gradient}",
              flush=True)

    fit = fit_energy_scales(
        system, potential, teacher_sample, model_starts, names, args.temperature, args.iterations,
        steps, discard, every, args.max_step, device, args.seed + 1, args.dt, progress=report,
    )
    scaled = fit.potential.cpu()
    record = {
        "model": str(args.model), "teacher_start": str(args.teacher_start),
        "model_start": str(args.model_start or args.teacher_start), "persistent_chains": True,
        "temperature_K": args.temperature, "replicas": int(starts.shape[0]),
        "sample_ps": args.time, "discard_ps": args.discard, "frame_ps": args.every,
        "timestep_fs": args.dt, "max_step": args.max_step, "scales": fit.scales,
        "teacher_frames": int(teacher_sample.positions.shape[0]),
        "teacher_q_mean": fit.teacher_q_mean,
        "teacher_folded_fraction": fit.teacher_folded_fraction,
        "teacher_flipped_dihedrals": fit.teacher_flipped_dihedrals,
        "interrupted": fit.interrupted, "history": fit.history,
    }
    earlier = potential.metadata.get("energy_scales") or {}  # a fit of a fitted model
    total = {name: earlier.get(name, 1.0) * fit.scales.get(name, 1.0)
             for name in {**earlier, **fit.scales}}
    scaled.metadata = {**potential.metadata, "energy_scales": total}
    save_potential(scaled, out)
    card = read_model_card(args.model)
    card.pop("validation", None)  # it was the unscaled model's
    card["energy_scales"] = record
    write_model_card(card, out)
    last = fit.history[-1]
    print(_summary_table([
        ("scales", ", ".join(f"{k} {v:.4f}" for k, v in fit.scales.items())),
        ("Q mean", f"model {last['q_mean']:.3f}, teacher {fit.teacher_q_mean:.3f}"),
        ("folded", f"model {last['folded_fraction']:.2f}, "
                   f"teacher {fit.teacher_folded_fraction:.2f}"),
        ("model", f"{out} (card {card_path(out)})"),
    ]))
    if fit.interrupted:
        print(f"interrupted: the scales of iteration {last['iteration']}, the last finished")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {
        "run": cmd_run, "info": cmd_info, "bench": cmd_bench, "train": cmd_train,
        "validate": cmd_validate, "fit-scales": cmd_fit_scales,
    }[args.command]
    try:
        return handler(args)
    except (UsageError, ValueError, FileNotFoundError, PermissionError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
