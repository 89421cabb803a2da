"""Tiny runs and injected faults shared by the fault-injection tests (`tests/faults`).

A fault is injected, never timed: a write function of the run is wrapped so that its
n-th call raises (:func:`fail_at`). :class:`SimulatedCrash` stands for a process killed
at that point: nothing of the run catches it, so the run ends there with its files as a
kill would leave them (what the run synced is on disk; the rest is cut back on resume).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import torch

from workbench.cli import main

pytest.importorskip("mdtraj")

#: A prior-only (teacher) run of CLN025: 2 replicas, 6 steps, a save every 2 steps.
STEPS = 6
TINY = ["run", "--protein", "cln025", "--replicas", "2", "--save-interval", "2",
        "--device", "cpu", "--quiet", "--model", "teacher"]
#: Run kinds: DCD trajectories; XTC trajectories with a ladder exchanging every step.
KINDS = {
    "dcd": ["--format", "dcd"],
    "xtc-ladder": ["--format", "xtc", "--ladder", "300:400:2", "--exchange-every", "1"],
}


class SimulatedCrash(BaseException):
    """The process was killed here (nothing in the run catches it)."""


def run_cli(*arguments: str) -> tuple[int, str, str]:
    """``workbench`` in-process: exit code, stdout, stderr."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([str(a) for a in arguments])
    return code, stdout.getvalue(), stderr.getvalue()


def fail_at(monkeypatch, owner, name: str, call: int, fault: BaseException,
            done: bool = True) -> None:
    """Make the ``call``-th call of ``owner.name`` (1-based) raise ``fault``, once it has
    done its work (``done``) or instead of it."""
    original = getattr(owner, name)
    calls = 0

    def wrapped(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == call and not done:
            raise fault
        result = original(*args, **kwargs)
        if calls == call:
            raise fault
        return result

    monkeypatch.setattr(owner, name, wrapped)


def records(folder: Path) -> dict[str, bytes]:
    """The bytes of every record file of a run folder (metrics, exchanges, trajectories)."""
    paths = [folder / "metrics.csv", folder / "exchanges.csv",
             *sorted((folder / "trajectory").glob("replica_*"))]
    return {str(p.relative_to(folder)): p.read_bytes() for p in paths if p.is_file()}


def checkpoint_step(folder: Path) -> int | None:
    """The step of a run folder's checkpoint (None without one)."""
    path = folder / "checkpoint.pt"
    return int(torch.load(path, weights_only=True)["step"]) if path.is_file() else None


def finish(folder: Path, kind: str) -> tuple[int, str, str]:
    """Continue a stopped run to :data:`STEPS` steps: resumed from its checkpoint, or run
    again from the start where it saved none."""
    step = checkpoint_step(folder)
    if step is None:
        return run_cli(*TINY, *KINDS[kind], "--steps", STEPS, "--out", folder, "--overwrite")
    return run_cli(*TINY, *KINDS[kind], "--steps", STEPS - step, "--out", folder, "--resume")


def assert_same_run(folder: Path, reference: Path) -> None:
    """Records byte for byte (so row for row and frame for frame) and the final state."""
    assert records(folder) == records(reference)
    a, b = (torch.load(p / "checkpoint.pt", weights_only=True) for p in (folder, reference))
    assert a["step"] == b["step"] == STEPS
    for key in ("positions", "velocities", "rng_state"):
        assert torch.equal(a[key], b[key]), key


@pytest.fixture(scope="session")
def reference_runs(tmp_path_factory) -> dict[str, Path]:
    """One uninterrupted run of each kind."""
    runs = {}
    for kind, extra in KINDS.items():
        folder = tmp_path_factory.mktemp("reference") / kind
        code, _, err = run_cli(*TINY, *extra, "--steps", STEPS, "--out", folder)
        assert code == 0, err
        runs[kind] = folder
    return runs
