"""Force and energy error of kernel configurations against the FP32 reference path.

    python -m benchmarks.force_error [--protein 1enh] [--replicas 64] [--steps 200]
        [--configs tables+graph,tables+graph-fp16,tables+graph-bf16] [--model demo]
        [--arch schnet] [--device cuda] [--out result.json]

The reference path runs ``--steps`` Langevin steps from the native structure (so the
replicas are thermal, not native); at those positions and that graph every configuration's
energies and forces are compared with the reference's, in FP32 and in FP64 (the reference
path evaluated in double precision, which bounds the FP32 paths' own rounding). Whole-step
options (CUDA graphs, pair search, integrator) do not change a force evaluation and are
dropped. Errors are given for the whole potential and for its network alone (the prior
terms' forces are often the larger part and would hide the network's error). Prints JSON:
per configuration and part, the relative RMS force error, the largest per-bead force error
over the RMS force, and the largest energy error per replica in kcal/mol.
"""

from __future__ import annotations

import argparse
import copy
import json
from dataclasses import replace

import torch

from workbench.files import atomic_write_json
from workbench.model.options import KernelOptions
from workbench.model.potential import Potential
from workbench.runner import RunSettings, prepare_run


def errors(energy, forces, ref_energy, ref_forces) -> dict:
    """Relative RMS and worst per-bead force error, worst energy error (float64 math)."""
    diff = (forces.double() - ref_forces.double())
    rms = ref_forces.double().pow(2).mean().sqrt()
    return {
        "force_rel_rms": float(diff.pow(2).mean().sqrt() / rms),
        "force_max_over_rms": float(diff.norm(dim=-1).max() / rms),
        "energy_max_abs": float((energy.double() - ref_energy.double()).abs().max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protein", default="1enh")
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--configs", default="tables+graph,tables+graph-fp16,tables+graph-bf16")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--arch", default="schnet", help="the network's architecture")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=None, help="JSON file for the result")
    args = parser.parse_args()
    settings = RunSettings(protein=args.protein, model=args.model, replicas=args.replicas,
                           device=args.device, seed=0, options=KernelOptions(),
                           architecture=args.arch)
    sim = prepare_run(settings).simulation
    sim.step(args.steps)
    pos, graph = sim.positions, sim.graph
    parts = {"potential": sim.potential,
             "network": Potential(sim.potential.bead_types, sim.potential.network)}
    result = {"protein": args.protein, "replicas": args.replicas, "steps": args.steps,
              "model": args.model, "architecture": args.arch,
              "device": torch.cuda.get_device_name(sim.device)
              if sim.device.type == "cuda" else "cpu"}
    for part, potential in parts.items():
        ref_energy, ref_forces = potential.energy_and_forces(pos, graph)
        energy64, forces64 = copy.deepcopy(potential).double().energy_and_forces(
            pos.double(), graph)
        row = {"reference_vs_fp64": errors(ref_energy, ref_forces, energy64, forces64)}
        for name in args.configs.split(","):
            options = replace(KernelOptions.parse(name), cuda_graph=False, fused_pair_search=False,
                              fused_integrator=False)
            energy, forces = potential.energy_and_forces(pos, graph, options)
            row[name] = {"vs_fp32_reference": errors(energy, forces, ref_energy, ref_forces),
                         "vs_fp64": errors(energy, forces, energy64, forces64)}
        result[part] = row
    print(json.dumps(result, indent=2))
    if args.out:
        atomic_write_json(args.out, result)


if __name__ == "__main__":
    main()
