"""Two runs into one folder: the second refuses while the first holds the folder's lock; a
lock left by a killed process is taken over; SIGTERM stops a run like Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_runs import STEPS, TINY, run_cli

from workbench.cli.output import FOLDER_LOCK
from workbench.files import LockedError, output_lock

ROOT = Path(__file__).resolve().parents[2]


def wait_for(condition, seconds: float = 120.0) -> None:
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("the other run did not get going")
        time.sleep(0.05)


def test_a_second_process_is_refused_and_sigterm_stops_the_first_cleanly(tmp_path):
    folder = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", *TINY, "--steps", "1000000",
         "--save-interval", "50", "--out", str(folder)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        wait_for(lambda: (folder / "checkpoint.pt").is_file() or first.poll() is not None)
        assert first.poll() is None, first.communicate()
        for extra in ([], ["--resume"], ["--overwrite"]):
            code, _, err = run_cli(*TINY, "--steps", STEPS, "--out", folder, *extra)
            assert code == 2
            assert f"run folder {folder} is in use by process {first.pid} on this host" in err
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 143, err
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["checkpoint_step"] % 50 == 0
    assert not (folder / FOLDER_LOCK).exists()
    code, out, err = run_cli(*TINY, "--steps", 2, "--save-interval", "50", "--out", folder,
                             "--resume")
    assert code == 0, err


def test_a_run_in_this_process_holding_the_folder_refuses_another(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    with output_lock(folder / FOLDER_LOCK, "run folder"):
        code, _, err = run_cli(*TINY, "--steps", STEPS, "--out", folder)
    assert code == 2 and f"in use by process {os.getpid()} on this host" in err
    assert sorted(p.name for p in folder.iterdir()) == []


def test_a_stale_lock_of_a_killed_run_is_taken_over(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / FOLDER_LOCK).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": int(gone.stdout), "since": 0.0}))
    code, _, err = run_cli(*TINY, "--steps", STEPS, "--out", folder)
    assert code == 0, err
    assert not (folder / FOLDER_LOCK).exists()


def test_a_lock_of_another_host_is_refused_with_its_owner_named(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text(json.dumps({"host": "node-17", "pid": 4242, "since": 0.0}))
    taken = output_lock(lock, "run folder x")
    with pytest.raises(LockedError, match="process 4242 on host node-17 .* remove the lock"):
        taken.__enter__()
    assert lock.exists()


def test_an_unreadable_lock_is_refused_and_named(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("{half")
    taken = output_lock(lock, "run folder x")
    with pytest.raises(LockedError, match="cannot be read; remove it"):
        taken.__enter__()
