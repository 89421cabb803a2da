"""Folded and unfolded populations, events and the Q histogram of runs' metrics.

    python scripts/run_states.py RUN [RUN ...] [--out states.json]

Each RUN is a ``workbench run`` output folder (or its ``metrics.csv``). For every run it
prints the simulated time, the folded (Q > 0.8) and unfolded (Q < 0.4) fractions over all
replicas and saves, the mean Q, the folding and unfolding events (with hysteresis,
`workbench.training.validate.run_states`) and a ten-bin Q histogram. It is the
table used to calibrate a teacher in long runs (``workbench run --model
teacher:eps=0.3,barrier=0.5``):
a two-state protein shows two separated peaks, a downhill one a single broad peak.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workbench.cli import atomic_write_text
from workbench.training.validate import run_states


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run folders or metrics CSV files")
    parser.add_argument("--out", default=None, help="JSON file for the table")
    args = parser.parse_args()
    table = [run_states(run) for run in args.runs]
    print("| run | ps | folded | unfolded | mean Q | events (fold, unfold) | Q histogram, 0.1 "
          "bins |\n|---|---|---|---|---|---|---|")
    for row in table:
        print(f"| {row['run']} | {row['time_ps']:,.0f} | {row['folded']:.3f} | "
              f"{row['unfolded']:.3f} | {row['mean_q']:.3f} | ({row['folding_events']}, "
              f"{row['unfolding_events']}) | {' '.join(map(str, row['q_histogram']))} |")
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
