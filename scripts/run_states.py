"""Folded and unfolded populations, events and the Q histogram of runs' metrics.

    python scripts/run_states.py RUN [RUN ...] [--basin 0.5,0.3] [--out states.json]

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
    parser.add_argument("--basin", default=None, metavar="HIGH,LOW",
                        help="also the fraction above HIGH and the events with the "
                        "thresholds HIGH / LOW (a native basin below Q 0.8, e.g. 0.5,0.3)")
    parser.add_argument("--out", default=None, help="JSON file for the table")
    args = parser.parse_args()
    basin = None
    if args.basin is not None:
        try:
            high, low = (float(v) for v in args.basin.split(","))
        except ValueError:
            parser.error(f"--basin must be HIGH,LOW (e.g. 0.5,0.3), got {args.basin!r}")
        basin = (high, low)
    try:
        table = [run_states(run, basin) for run in args.runs]
    except ValueError as exc:
        parser.error(str(exc))
    extra = " | basin | basin events" if basin else ""
    print(f"| run | ps | folded | unfolded | mean Q | events (fold, unfold){extra} | Q histogram, "
          f"0.1 bins |\n|---|---|---|---|---|---|{'---|---|' if basin else ''}---|")
    for row in table:
        columns = [row["run"], f"{row['time_ps']:,.0f}", f"{row['folded']:.3f}",
                   f"{row['unfolded']:.3f}", f"{row['mean_q']:.3f}",
                   f"({row['folding_events']}, {row['unfolding_events']})"]
        if basin:
            columns += [f"{row['basin_fraction']:.3f}", "({}, {})".format(*row["basin_events"])]
        columns.append(" ".join(map(str, row["q_histogram"])))
        print(f"| {' | '.join(columns)} |")
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
