"""An exclusive lock on an output (a run folder, a model file, a benchmark result).

The lock is a small JSON file created with ``O_CREAT | O_EXCL``, so exactly one process
gets it; it names the owner's host and process id. A lock whose owner was on this host
and whose process is gone is stale (the owner was killed) and is taken over; a lock of a
live process, or of another host (whose processes cannot be checked from here), is
refused with the owner named.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path


class LockedError(RuntimeError):
    """The output is locked by another process (or by a run going on in this one)."""


def _owner() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a live process of another user
        return True
    return True


def _read_owner(path: Path) -> dict | None:
    try:
        owner = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def _try_create(path: Path, owner: dict) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as handle:
        json.dump(owner, handle)
    return True


@contextlib.contextmanager
def output_lock(path: str | os.PathLike, what: str) -> Iterator[Path]:
    """Hold the lock file ``path`` while the body writes the output it guards.

    Parameters
    ----------
    path : str or os.PathLike
        The lock file (its folder must exist).
    what : str
        The guarded output, for messages ("run folder runs/a").

    Raises
    ------
    LockedError
        Another live process (or another run in this process) holds the lock, its owner
        is on another host, or the lock file cannot be read.
    """
    path = Path(path)
    owner = _owner()
    for _ in range(2):  # a second try after taking over a stale lock
        if _try_create(path, owner):
            break
        held = _read_owner(path)
        if held == {}:  # released between the two calls
            continue
        if held is None or "pid" not in held:
            raise LockedError(f"{what} is locked by {path}, which cannot be read; remove it "
                              "if no process is writing there")
        here = held.get("host") == owner["host"]
        if here and not _alive(int(held["pid"])):
            path.unlink(missing_ok=True)  # stale: its process is gone
            continue
        where = "this host" if here else f"host {held.get('host')}"
        raise LockedError(
            f"{what} is in use by process {held['pid']} on {where} (lock {path}); wait for "
            "it to end" + ("" if here else ", or remove the lock if that process is gone")
        )
    else:
        raise LockedError(f"{what}: could not take the lock {path}")
    try:
        yield path
    finally:
        if _read_owner(path) == owner:
            path.unlink(missing_ok=True)
