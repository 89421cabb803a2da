"""Where a model's energy error over its teacher's ensemble sits, term by term.

    python scripts/energy_error_by_term.py MODEL TEACHER_RUN [--steps 3000] [--discard 500]
        [--every 250] [--temperature 300] [--device cpu] [--ends RUN[,RUN...]] [--out F.json]

The teacher of MODEL's card runs from the final structures of TEACHER_RUN (a long
``workbench run`` of that teacher, i.e. its equilibrium) and its frames are kept. Over
them the script prints:

- the spread (std) of model − teacher energy, in kcal/mol and in kT, and its correlation
  with Q: an error of several kT reweights the model's ensemble away from the teacher's;
- the spread of each term of the model and of the teacher, and each one's correlation
  with that error: two large model terms that cancel (say SchNet against a prior) leave
  the error of their cancellation;
- the least-squares slopes of SchNet's energy on the priors' energies, and those of its
  target (teacher − priors): a slope near −1 on a prior term is a network that learned to
  take that term's energy back over the data, and carries the habit past them;
- the model's repulsion prior by bond separation of its pairs: energy mean and spread,
  and the share of pair distances inside its range (a prior fitted per pair repels pairs
  across the fold at the closest distance they reached in the training data);
- the repulsion refitted on these frames with each grouping of
  :func:`~workbench.training.boltzmann_inversion.repulsion_sigma`, energy mean and spread,
  and with ``--ends`` its mean energy at the final structures of those runs (runs of models
  that left the teacher's states: how hard each grouping's walls hold against that).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from workbench.cli import UsageError, atomic_write_text, model_and_teacher
from workbench.md.simulation import checkpoint_positions
from workbench.model.geometry import bond_lengths
from workbench.system.topology import graph_distances
from workbench.training.boltzmann_inversion import (
    REPULSION_GROUPINGS,
    REPULSION_RANGE,
    repulsion_sigma,
)
from workbench.training.energy_scales import sample_frames, term_energies
from workbench.units import KB

#: Bond-separation classes of the repulsion pairs reported, (lowest, highest).
SEPARATION_CLASSES = ((4, 4), (5, 5), (6, 8), (9, None))


def correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two series, shape (M,)."""
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    scale = (a.square().sum() * b.square().sum()).sqrt()
    return float((a * b).sum() / scale) if scale > 0 else 0.0


def prior_slopes(energy: torch.Tensor, priors: torch.Tensor) -> list[float]:
    """Least-squares slopes of ``energy`` (M,) on the columns of ``priors`` (M, K), both
    centred (energies are known up to a constant)."""
    x = (priors - priors.mean(0)).double()
    y = (energy - energy.mean()).double()[:, None]
    return torch.linalg.lstsq(x, y).solution.flatten().tolist()


def spread(values: torch.Tensor) -> dict:
    """Mean and std of a series, shape (M,)."""
    return {"mean": float(values.mean()), "std": float(values.std())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a trained model file (its card names its teacher)")
    parser.add_argument("teacher_run", help="a run folder of that teacher (its checkpoint)")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--discard", type=int, default=500)
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--temperature", type=float, default=300.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ends", default=None, metavar="RUN[,RUN...]",
                        help="runs at whose final structures the refitted repulsions are "
                        "also evaluated")
    parser.add_argument("--out", default=None, help="JSON file for the numbers")
    args = parser.parse_args()
    try:
        model, system, teacher = model_and_teacher(args.model)
        ends = {run: checkpoint_positions(run, system)
                for run in (args.ends or "").split(",") if run.strip()}
        starts = checkpoint_positions(args.teacher_run, system)
        sample = sample_frames(system, teacher, starts, args.temperature, args.steps,
                               args.discard, args.every, args.device, args.seed)
    except (UsageError, ValueError, OSError) as exc:
        parser.error(str(exc))
    positions, q = sample.positions, sample.q
    model_names = (["schnet"] if model.schnet is not None else []) + list(model.priors)
    teacher_names = list(teacher.priors)
    model_terms = term_energies(model, positions, model_names, args.device)
    teacher_terms = term_energies(teacher, positions, teacher_names, args.device)
    error = model_terms.sum(1) - teacher_terms.sum(1)
    kT = KB * args.temperature
    report = {
        "frames": positions.shape[0],
        "error_std": float(error.std()),
        "error_std_kT": float(error.std() / kT),
        "error_q_correlation": correlation(error, q),
        "model_terms": {name: {**spread(model_terms[:, i]),
                               "error_correlation": correlation(error, model_terms[:, i])}
                        for i, name in enumerate(model_names)},
        "teacher_terms": {name: {**spread(teacher_terms[:, i]),
                                 "error_correlation": correlation(error, teacher_terms[:, i])}
                          for i, name in enumerate(teacher_names)},
    }
    if "repulsion" in model.priors:
        repulsion = model.priors["repulsion"]
        pairs = repulsion.index
        separation = graph_distances(system.n_beads, system.bonds)[pairs[:, 0], pairs[:, 1]]
        energy = repulsion.term_energies(positions)
        inside = bond_lengths(positions, pairs) < _wall_range(repulsion)
        report["repulsion_by_separation"] = {}
        for low, high in SEPARATION_CLASSES:
            mask = separation >= low if high is None else (separation >= low) & (separation <= high)
            if mask.any():
                report["repulsion_by_separation"][f"{low}-{high or ''}"] = {
                    "pairs": int(mask.sum()), **spread(energy[:, mask].sum(1)),
                    "inside_range": float(inside[:, mask].float().mean()),
                }
        report["repulsion_refitted"] = {}
        for grouping in REPULSION_GROUPINGS:
            sigma = repulsion_sigma(system, positions, pairs, grouping).float()
            refit = type(repulsion)(pairs, **_repulsion_parameters(repulsion, sigma))
            report["repulsion_refitted"][grouping] = {
                **spread(refit(positions)),
                "at_ends": {run: float(refit(end).mean()) for run, end in ends.items()},
            }
    priors = [i for i, name in enumerate(model_names) if name != "schnet"]
    if "schnet" in model_names and priors:
        target = teacher_terms.sum(1) - model_terms[:, priors].sum(1)
        report["slopes_on_priors"] = {
            "terms": [model_names[i] for i in priors],
            "schnet": prior_slopes(model_terms[:, 0], model_terms[:, priors]),
            "target": prior_slopes(target, model_terms[:, priors]),
        }
    print(json.dumps(report, indent=2))
    if args.out is not None:
        atomic_write_text(Path(args.out), json.dumps(report, indent=2) + "\n")


def _wall_range(repulsion) -> torch.Tensor:
    """Distance (P,) within which each pair of ``repulsion`` feels it: its cutoff, or for
    the power form (all distances) the cutoff form's ``REPULSION_RANGE · σ``."""
    return getattr(repulsion, "cutoff", REPULSION_RANGE * repulsion.sigma)


def _repulsion_parameters(repulsion, sigma: torch.Tensor) -> dict:
    """Parameters of a repulsion of ``repulsion``'s form (power, cutoff or edge: its own
    ratio of cutoff to σ) with radii ``sigma``."""
    if hasattr(repulsion, "cutoff"):
        return {"sigma": sigma, "cutoff": _wall_range(repulsion) / repulsion.sigma * sigma}
    return {"sigma": sigma}


if __name__ == "__main__":
    main()
