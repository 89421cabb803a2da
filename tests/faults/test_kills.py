"""A run killed at any write boundary and then resumed equals the uninterrupted run, row
for row and frame for frame: every record is covered by the checkpoint or cut back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fault_runs import (
    KINDS,
    STEPS,
    TINY,
    SimulatedCrash,
    assert_same_run,
    fail_at,
    finish,
    run_cli,
)

from workbench.cli.output import FOLDER_LOCK
from workbench.md.reporters import MetricsReporter
from workbench.md.simulation import Simulation
from workbench.md.tempering import ReplicaExchange
from workbench.md.trajectory_files import AppendedTrajectory

ROOT = Path(__file__).resolve().parents[2]
SAVES = STEPS // 2
#: Every write of a run: (kind of run, owner, function, calls in the uninterrupted run).
WRITES = [
    (kind, owner, name, calls)
    for kind in ("dcd", "xtc-ladder")
    for owner, name, calls in [
        (MetricsReporter, "write", SAVES),
        (AppendedTrajectory, "append", 2 * SAVES),  # two replicas
        (Simulation, "save_checkpoint", SAVES),
        *([(ReplicaExchange, "exchange", STEPS)] if kind == "xtc-ladder" else []),
    ]
]
CASES = [
    pytest.param(kind, owner, name, call, id=f"{kind}-{owner.__name__}.{name}-{call}")
    for kind, owner, name, calls in WRITES
    for call in range(1, calls + 1)
]


@pytest.mark.parametrize(("kind", "owner", "name", "call"), CASES)
def test_killed_after_any_write_then_resumed_equals_the_uninterrupted_run(
    kind, owner, name, call, reference_runs, tmp_path, monkeypatch
):
    folder = tmp_path / "run"
    with monkeypatch.context() as patch:
        fail_at(patch, owner, name, call, SimulatedCrash())
        with pytest.raises(SimulatedCrash):
            run_cli(*TINY, *KINDS[kind], "--steps", STEPS, "--out", folder)
    assert not (folder / "summary.json").exists()
    code, _, err = finish(folder, kind)
    assert code == 0, err
    assert_same_run(folder, reference_runs[kind])


def test_a_torn_last_record_is_cut_off(reference_runs, tmp_path, monkeypatch):
    """A kill in the middle of a write leaves half a row and half a frame: both go."""
    for kind in KINDS:
        folder = tmp_path / kind
        with monkeypatch.context() as patch:
            fail_at(patch, MetricsReporter, "write", 2, SimulatedCrash())
            with pytest.raises(SimulatedCrash):
                run_cli(*TINY, *KINDS[kind], "--steps", STEPS, "--out", folder)
        with open(folder / "metrics.csv", "ab") as handle:
            handle.write(b"4,0.0160,0,300.00,31")
        for path in (folder / "trajectory").glob("replica_*"):
            with open(path, "ab") as handle:
                handle.write(path.read_bytes()[:60])  # the start of a frame
        code, out, err = finish(folder, kind)
        assert code == 0, err
        assert "cut back to the checkpoint: metrics.csv: 3 rows after step 2 removed" in out
        assert_same_run(folder, reference_runs[kind])


#: A process that dies (``os._exit``: no clean-up, no flush, its lock left behind) right
#: after the n-th call of a function, then runs ``workbench`` with the other arguments.
DYING_PROCESS = """
import importlib, os, sys
from workbench.cli import main
module, _, attribute = sys.argv[1].partition(":")
owner_name, _, name = attribute.rpartition(".")
owner = getattr(importlib.import_module(module), owner_name)
original, calls = getattr(owner, name), [0]
def dying(*args, **kwargs):
    result = original(*args, **kwargs)
    calls[0] += 1
    if calls[0] == int(sys.argv[2]):
        os._exit(137)
    return result
setattr(owner, name, dying)
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.parametrize(
    ("kind", "target", "call"),
    [
        ("dcd", "workbench.md.trajectory_files:AppendedTrajectory.append", 3),
        ("xtc-ladder", "workbench.md.tempering:ReplicaExchange.exchange", 3),
        ("xtc-ladder", "workbench.md.simulation:Simulation.save_checkpoint", 2),
    ],
    ids=["dcd-frame", "xtc-exchange", "xtc-checkpoint"],
)
def test_a_process_killed_mid_run_resumes_to_the_uninterrupted_run(
    kind, target, call, reference_runs, tmp_path
):
    folder = tmp_path / "run"
    died = subprocess.run(
        [sys.executable, "-c", DYING_PROCESS, target, str(call), *TINY, *KINDS[kind],
         "--steps", str(STEPS), "--out", str(folder)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert died.returncode == 137, died.stderr
    assert (folder / FOLDER_LOCK).exists()  # a kill leaves its lock: stale, taken over
    code, _, err = finish(folder, kind)
    assert code == 0, err
    assert_same_run(folder, reference_runs[kind])
