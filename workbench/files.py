"""Files that never lie: atomic writes, and an exclusive lock on an output.

Atomic writes: a reader sees the old file or the new one, never half of either.
Every writer of the project goes through :func:`atomic_write`: the content goes to a
temporary file in the destination's folder, is flushed to disk (``fsync``) and then
renamed over the destination (``os.replace``, atomic on POSIX and Windows). On any
failure the temporary file is removed and an existing destination is left untouched.
The file gets the mode a plain ``open`` would give it (0666 less the process's umask),
not the 0600 of a temporary file, so that shared folders stay readable.

An exclusive lock on an output (a run folder, a model file, a benchmark result),
:func:`output_lock`, is a small JSON file created with ``O_CREAT | O_EXCL``, so exactly
one process gets it; it names the owner's host and process id. A lock whose owner was on this host
and whose process is gone is stale (the owner was killed) and is taken over; a lock of a
live process, or of another host (whose processes cannot be checked from here), is
refused with the owner named.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import torch


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path``, then rename it to ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        Destination; its folder must exist.
    write : callable
        Writes the whole content to the binary handle it is given.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    FileNotFoundError
        The destination's folder does not exist.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        os.chmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def current_umask() -> int:
    """The process's umask: read from ``/proc/self/status`` where there is one (Linux),
    else by setting it and setting it back (racy with threads creating files)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: str | os.PathLike, document, indent: int = 2) -> Path:
    """Write ``document`` to ``path`` atomically as indented JSON with a final newline."""
    return atomic_write_text(path, json.dumps(document, indent=indent) + "\n")


def atomic_save(obj, path: str | os.PathLike) -> Path:
    """``torch.save`` of ``obj`` to ``path`` atomically."""
    return atomic_write(path, lambda handle: torch.save(obj, handle))


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
