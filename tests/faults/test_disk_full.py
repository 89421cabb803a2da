"""A full disk (an injected ENOSPC) ends a run with one line that says what was kept and
how to go on; the resumed run then equals the uninterrupted one."""

from __future__ import annotations

import errno

import pytest
from fault_runs import KINDS, STEPS, TINY, assert_same_run, fail_at, finish, run_cli

from workbench.files import atomic_write
from workbench.md import simulation
from workbench.md.reporters import MetricsReporter
from workbench.md.tempering import ReplicaExchange
from workbench.md.trajectory_files import AppendedTrajectory


def disk_full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    ("kind", "owner", "name", "call"),
    [
        ("dcd", MetricsReporter, "write", 2),
        ("dcd", AppendedTrajectory, "append", 3),
        ("dcd", AppendedTrajectory, "flush", 3),
        ("xtc-ladder", ReplicaExchange, "flush", 2),
        ("xtc-ladder", simulation, "atomic_save", 2),
    ],
    ids=["metrics", "frame", "frame-flush", "exchange-log-flush", "checkpoint"],
)
def test_disk_full_ends_in_one_line_and_the_resume_is_exact(
    kind, owner, name, call, reference_runs, tmp_path, monkeypatch
):
    folder = tmp_path / "run"
    with monkeypatch.context() as patch:
        fail_at(patch, owner, name, call, disk_full(), done=False)
        code, _, err = run_cli(*TINY, *KINDS[kind], "--steps", STEPS, "--out", folder)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("error: writing the run failed at step ")
    assert "No space left on device" in err and "Traceback" not in err
    assert "are intact; free the space and continue with --resume" in err
    code, _, err = finish(folder, kind)
    assert code == 0, err
    assert_same_run(folder, reference_runs[kind])


def test_disk_full_before_the_first_checkpoint_says_to_start_again(tmp_path, monkeypatch):
    monkeypatch.setattr(MetricsReporter, "write", lambda *args: (_ for _ in ()).throw(disk_full()))
    code, _, err = run_cli(*TINY, "--steps", STEPS, "--out", tmp_path / "run")
    assert code == 1 and "no checkpoint was saved yet: run again with --overwrite" in err


def test_a_failed_xtc_write_is_reported_as_an_os_error(tmp_path, monkeypatch):
    """mdtraj reports a failed XTC write with a TypeError from its own error path."""
    mdtraj = pytest.importorskip("mdtraj")

    class Broken:  # mdtraj's writer, failing as it does on a full disk (not a subclass:
        # subclassing the extension type crashes the interpreter when collected)
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, *args, **kwargs):
            raise TypeError("'dict' object is not callable")

    monkeypatch.setattr(mdtraj.formats, "XTCTrajectoryFile", Broken)
    code, _, err = run_cli(*TINY, *KINDS["xtc-ladder"], "--steps", STEPS,
                           "--out", tmp_path / "run")
    assert code == 1 and "could not write an XTC frame" in err and "Traceback" not in err


def test_atomic_writes_leave_no_partial_file_on_a_full_disk(tmp_path):
    def half(handle):
        handle.write(b"half")
        raise disk_full()

    with pytest.raises(OSError, match="No space"):
        atomic_write(tmp_path / "checkpoint.pt", half)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_the_run_folder_is_set_up_is_one_line(tmp_path, monkeypatch):
    from workbench import run_folder

    fail_at(monkeypatch, run_folder, "atomic_write_json", 1, disk_full(), done=False)
    code, _, err = run_cli(*TINY, "--steps", STEPS, "--out", tmp_path / "run")
    assert code == 1 and err == "error: [Errno 28] No space left on device\n"
