"""Which native contacts two runs hold differently, at the structures where they ended.

    python scripts/contact_populations.py RUN_A RUN_B --protein 1yrf [--top 12] [--out F]

RUN_A and RUN_B are ``workbench run`` folders (or their ``checkpoint.pt``), say the
teacher's long run and a model's. For every native contact the share formed over each
run's final structures (the smooth contact of Q: ``1 / (1 + exp(r − 1.5 r0))``, CA–CA,
Å) is printed for the contacts whose shares differ most, both ways, with each run's Q
spread. Two ensembles with one mean Q can differ by which contacts they break: a model
that holds every contact a little stretched against a teacher that breaks a few outright.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workbench.analysis.native_contacts import contact_formation
from workbench.cli import atomic_write_text
from workbench.md.simulation import checkpoint_positions
from workbench.system import build_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs=2, help="two run folders or checkpoint files")
    parser.add_argument("--protein", required=True)
    parser.add_argument("--top", type=int, default=12, help="contacts listed each way")
    parser.add_argument("--out", default=None, help="JSON file for every contact's shares")
    args = parser.parse_args()
    try:
        system = build_system(args.protein)
        shares = [
            contact_formation(checkpoint_positions(run, system)[:, system.ca_index],
                              system.native_contacts, system.native_contact_distances)
            for run in args.runs
        ]
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    names = [Path(run).name or run for run in args.runs]
    for name, share in zip(names, shares, strict=True):
        q = share.mean(1)
        print(f"{name}: {share.shape[0]} structures, Q mean {float(q.mean()):.3f}, "
              f"spread (std) {float(q.std()):.3f}")
    mean_a, mean_b = (share.mean(0) for share in shares)
    order = (mean_a - mean_b).argsort()
    pairs = system.native_contacts.tolist()
    r0 = system.native_contact_distances.tolist()
    for title, picked in ((f"formed less in {names[0]}", order[: args.top]),
                          (f"formed more in {names[0]}", order.flip(0)[: args.top])):
        print(f"{title} (residues, native CA-CA Å: {names[0]} / {names[1]})")
        for c in picked.tolist():
            print(f"  {pairs[c][0]:3d}-{pairs[c][1]:<3d} {r0[c]:5.1f}  "
                  f"{float(mean_a[c]):.2f} / {float(mean_b[c]):.2f}")
    if args.out is not None:
        rows = [{"contact": pairs[c], "r0": r0[c], names[0]: float(mean_a[c]),
                 names[1]: float(mean_b[c])} for c in range(len(pairs))]
        atomic_write_text(Path(args.out), json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
