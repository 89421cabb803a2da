"""What SchNet is left to learn with inverted and with refined bonded priors.

    python scripts/prior_residuals.py --protein 1yrf --teacher-run RUN
        [--temperatures 300,500] [--steps 1700] [--discard 200] [--every 25]
        [--frames 1024] [--flips RUN[,RUN...]] [--device cpu] [--out F.json]

The protein's teacher runs one replica group per temperature from the final structures of
RUN (a long ``workbench run`` of the teacher) and keeps a frame every ``--every`` steps
after ``--discard``. Over those frames the script prints:

- the RMS of the teacher's forces by term (the contacts and repulsion are what a network
  on top of exact bonded priors would have to learn);
- the RMS of the force target of force matching (teacher − priors) with the priors of
  ``workbench train``'s recipe (Boltzmann inversion at the lowest temperature, one-harmonic
  dihedrals, edge repulsion grouped ``touching`` from four bonds apart) before and after
  :func:`~workbench.training.prior_refinement.refine_priors`;
- the bond and angle force constants (median, 10th and 90th percentiles) of both fits and
  of the teacher;
- with ``--flips``: the share of dihedrals more than 90° from native at the final
  structures of those runs, by the bead names of the dihedral, beside the teacher run's.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch

from workbench.cli import atomic_write_text
from workbench.md.simulation import checkpoint_positions
from workbench.model.geometry import torsions
from workbench.model.potential import Potential
from workbench.system import build_system
from workbench.teacher import langevin_simulation, teacher_potential
from workbench.training.boltzmann_inversion import fit_priors
from workbench.training.force_matching import potential_labels
from workbench.training.prior_refinement import refine_priors


def teacher_frames(system, teacher, starts, temperatures, steps, discard, every, device):
    """Frames and teacher forces of runs from ``starts`` at every temperature."""
    group = starts.shape[0]
    temperature = torch.tensor(temperatures, dtype=torch.float32).repeat_interleave(group)
    sim = langevin_simulation(system, teacher, temperature,
                              starts.repeat(len(temperatures), 1, 1), device, seed=1)
    sim.step(discard)
    frames, labels = [], []
    for _ in range((steps - discard) // every):
        sim.step(every)
        frames.append(sim.positions.detach().cpu().clone())
        labels.append(temperature)
    positions = torch.cat(frames)
    return positions, potential_labels(teacher, positions, device=device)[1], torch.cat(labels)


def rms(forces: torch.Tensor) -> float:
    return float(forces.double().square().mean().sqrt())


def spread(values: torch.Tensor) -> dict:
    q = torch.quantile(values.double(), torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
    return {"p10": float(q[0]), "median": float(q[1]), "p90": float(q[2])}


def flips_by_kind(system, run) -> dict:
    """Share of dihedrals more than 90° from native at a run's final structures, by kind."""
    native = torsions(system.native_positions[None].double(), system.dihedrals)[0]
    phi = torsions(checkpoint_positions(run, system).double(), system.dihedrals)
    flipped = (torch.cos(phi - native) < 0).double().mean(0)
    kinds = defaultdict(list)
    for quad, share in zip(system.dihedrals.tolist(), flipped.tolist(), strict=True):
        kinds["-".join(system.bead_names[i] for i in quad)].append(share)
    out = {kind: sum(v) / len(v) for kind, v in kinds.items()}
    out["all"] = float(flipped.mean())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--protein", required=True)
    parser.add_argument("--teacher-run", required=True)
    parser.add_argument("--temperatures", default="300,500")
    parser.add_argument("--steps", type=int, default=1700)
    parser.add_argument("--discard", type=int, default=200)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--frames", type=int, default=1024, help="frames of the refit")
    parser.add_argument("--flips", default=None, help="comma list of run folders")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    system = build_system(args.protein)
    teacher = teacher_potential(system)
    temperatures = [float(t) for t in args.temperatures.split(",")]
    starts = checkpoint_positions(args.teacher_run, system)
    positions, forces, temperature = teacher_frames(
        system, teacher, starts, temperatures, args.steps, args.discard, args.every, args.device)
    report = {"frames": int(positions.shape[0]), "temperatures_K": temperatures,
              "teacher_force_rms": {}}
    for names in (["contacts"], ["repulsion"], ["contacts", "repulsion"], ["bonds"],
                  ["angles"], ["dihedrals"]):
        terms = {name: teacher.priors[name] for name in names}
        part = potential_labels(Potential(system.bead_types, None, terms), positions)[1]
        report["teacher_force_rms"]["+".join(names)] = rms(part)
    lowest = temperature == min(temperatures)
    priors = fit_priors(system, positions[lowest], min(temperatures), dihedral_degree=1,
                        repulsion="edge", repulsion_separation=4,
                        repulsion_grouping="touching", repulsion_positions=positions)
    refined, refinement = refine_priors(priors, positions, forces, frames=args.frames,
                                        device=args.device)
    report["refinement"] = refinement.card()
    report["force_constants"] = {
        name: {label: spread(terms[name].k) for label, terms in
               (("boltzmann", priors), ("refined", refined), ("teacher", teacher.priors))}
        for name in ("bonds", "angles")
    }
    if args.flips:
        report["flipped_dihedrals"] = {
            run: flips_by_kind(system, run)
            for run in [args.teacher_run, *args.flips.split(",")]
        }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        atomic_write_text(Path(args.out), text + "\n")


if __name__ == "__main__":
    main()
