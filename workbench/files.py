"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Every writer of the project goes through :func:`atomic_write`: the content goes to a
temporary file in the destination's folder, is flushed to disk (``fsync``) and then
renamed over the destination (``os.replace``, atomic on POSIX and Windows). On any
failure the temporary file is removed and an existing destination is left untouched.
The file gets the mode a plain ``open`` would give it (0666 less the process's umask),
not the 0600 of a temporary file, so that shared folders stay readable.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
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
