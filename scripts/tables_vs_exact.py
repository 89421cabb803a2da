"""Tabulated filters against the exact fused FP32 path in MD: one trained model, the same
replicas and seed, Q distributions compared (issue: the trained CLN025 model's Q histogram
with tables on must match the exact path's, intersection >= 0.95).

    python scripts/tables_vs_exact.py [--model workbench/models/data/cln025.pt]
        [--steps 10000] [--replicas 64] [--out result.json]

Prints the result as JSON (and writes it to --out): ``q_intersection``, folded fraction
and mean Q per path, with the settings.
"""

from __future__ import annotations

import argparse

from workbench.cli import print_json
from workbench.model.io import load_potential
from workbench.model.options import KernelOptions
from workbench.system import build_system
from workbench.training.validate import compare_force_paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="workbench/models/data/cln025.pt")
    parser.add_argument("--steps", type=int, default=10000)
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=300.0)
    parser.add_argument("--save-every", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=None, help="JSON file for the result")
    args = parser.parse_args()
    potential = load_potential(args.model)
    paths = {
        "tables": KernelOptions(tabulated_filter=True, cuda_graph=True),
        "exact": KernelOptions.all_on(cuda_graph=True),
    }
    result = compare_force_paths(
        build_system(potential.metadata["protein"]), potential, paths, args.temperature,
        args.replicas, args.steps, args.save_every, args.device, 0,
    )
    result.update(model=args.model, temperature=args.temperature, replicas=args.replicas,
                  steps=args.steps)
    print_json(result, args.out)


if __name__ == "__main__":
    main()
