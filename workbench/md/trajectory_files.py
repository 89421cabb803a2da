"""Append-only trajectory files that can be cut back to a whole number of frames.

A run writes one trajectory file per replica and only ever appends to it, so that a
resumed run can cut each file back to the frames its checkpoint covers (a truncation
and, for DCD, the frame count in the header) instead of reading the file and writing it
again. Two formats work this way:

* DCD (CHARMM layout, coordinates in Å, no unit cell): every frame has the same byte
  length, three Fortran records of float32 x, y and z. The header is written here (files
  of earlier versions, written by mdtraj, have the same layout); the frame count in it
  is updated after each appended frame.
* XTC (compressed, nm): every frame stands alone (XTC files have no header). A frame is
  encoded by mdtraj into a scratch file beside the trajectory and its bytes appended.

HDF5 files cannot be cut back without rewriting them in place, so runs written as HDF5
are not resumed (:func:`whole_frames` refuses them).
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import numpy as np

#: Formats whose files :func:`whole_frames` counts and :func:`cut_frames` cuts.
CUTTABLE = ("dcd", "xtc")

_DCD_TITLE = b"CG Workbench trajectory (Angstrom)".ljust(80)
#: Offsets of the frame count (NSET) and of the last step (NSTEP) in the header.
_DCD_NSET, _DCD_NSTEP = 8, 20
_XTC_MAGIC = 1995


class TrajectoryFileError(ValueError):
    """A trajectory file that is not of the expected layout or cannot be cut back."""


def _dcd_header(atoms: int) -> bytes:
    # NSET 0, ISTART 0, NSAVC 1, NSTEP 0, five zeros, DELTA 1.0 (as float), no unit cell,
    # nine zeros, CHARMM version 24
    control = [0, 0, 1, 0, 0, 0, 0, 0, 0]
    block = struct.pack("<i4s9if9iii", 84, b"CORD", *control, 1.0, *([0] * 9), 24, 84)
    title = struct.pack("<ii80si", 84, 1, _DCD_TITLE, 84)
    return block + title + struct.pack("<iii", 4, atoms, 4)


def _dcd_layout(path: Path, handle) -> tuple[int, int]:
    """Header and frame byte lengths of an open DCD file without unit cells."""
    head = handle.read(100)
    if len(head) < 100 or head[4:8] != b"CORD" or struct.unpack_from("<i", head, 0)[0] != 84:
        raise TrajectoryFileError(f"{path} is not a little-endian CHARMM DCD file")
    if struct.unpack_from("<i", head, 48)[0]:
        raise TrajectoryFileError(f"{path} holds unit cells: not a CG Workbench trajectory")
    header = 92 + 12 + 80 * struct.unpack_from("<i", head, 96)[0] + 12
    handle.seek(header - 8)
    atoms = struct.unpack("<i", handle.read(4))[0]
    return header, 3 * (4 * atoms + 8)


def _xtc_frame_ends(path: Path) -> list[int]:
    """Byte offset of the end of every whole frame of an XTC file, up to the first frame
    cut short or damaged."""
    ends = []
    size = path.stat().st_size
    with open(path, "rb") as handle:
        start = 0
        while start + 56 <= size:
            handle.seek(start)
            magic, atoms = struct.unpack(">ii", handle.read(8))
            if magic != _XTC_MAGIC:
                break
            if atoms <= 9:
                end = start + 56 + 12 * atoms
            else:
                handle.seek(start + 88)
                count = handle.read(4)
                if len(count) < 4:
                    break
                end = start + 92 + -(-struct.unpack(">i", count)[0] // 4) * 4
            if end > size:
                break
            ends.append(end)
            start = end
    return ends


def whole_frames(path: str | os.PathLike) -> int:
    """Whole frames in a DCD or XTC trajectory file (a frame cut short at the end, and for
    XTC anything after a damaged frame, is not counted).

    Raises
    ------
    TrajectoryFileError
        Another format, or a file not of the expected layout.
    """
    path = Path(path)
    fmt = path.suffix.lstrip(".")
    if fmt == "dcd":
        with open(path, "rb") as handle:
            header, frame = _dcd_layout(path, handle)
        return (path.stat().st_size - header) // frame
    if fmt == "xtc":
        return len(_xtc_frame_ends(path))
    raise TrajectoryFileError(
        f"{path}: .{fmt} trajectories cannot be cut back to a checkpoint without rewriting "
        f"them; a run is resumed only with {' or '.join(CUTTABLE)} trajectories"
    )


def cut_frames(path: str | os.PathLike, frames: int) -> None:
    """Cut a DCD or XTC file back to its first ``frames`` frames, in place.

    Raises
    ------
    TrajectoryFileError
        The file holds fewer whole frames, or is not of a cuttable format.
    """
    path = Path(path)
    held = whole_frames(path)
    if held < frames:
        raise TrajectoryFileError(f"{path} holds {held} whole frames, fewer than {frames}")
    if path.suffix == ".dcd":
        with open(path, "r+b") as handle:
            header, frame = _dcd_layout(path, handle)
            handle.truncate(header + frames * frame)
            _write_dcd_count(handle, frames)
    else:
        os.truncate(path, _xtc_frame_ends(path)[frames - 1] if frames else 0)


def _write_dcd_count(handle, frames: int) -> None:
    for offset in (_DCD_NSET, _DCD_NSTEP):
        handle.seek(offset)
        handle.write(struct.pack("<i", frames))
    handle.seek(0, os.SEEK_END)


class AppendedTrajectory:
    """One replica's DCD or XTC file, opened to append frames.

    Parameters
    ----------
    path : str or os.PathLike
        Created (DCD: with its header) when missing or empty.
    atoms : int
    """

    def __init__(self, path: str | os.PathLike, atoms: int):
        self.path = Path(path)
        self.fmt = self.path.suffix.lstrip(".")
        if self.fmt not in CUTTABLE:
            raise TrajectoryFileError(f"cannot append to .{self.fmt} files")
        self.atoms = int(atoms)
        self.frames = whole_frames(self.path) if self._has_content() else 0
        self._handle = open(self.path, "r+b" if self._has_content() else "w+b")  # noqa: SIM115
        if self.fmt == "dcd" and not self.frames:
            self._handle.write(_dcd_header(self.atoms))
        self._handle.seek(0, os.SEEK_END)

    def _has_content(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size > 0

    def append(self, positions: np.ndarray, time_ps: float) -> None:
        """Append one frame: ``positions`` (n, 3) float32, Å (an XTC frame records its
        number in the file as its step)."""
        if self.fmt == "dcd":
            data = b"".join(
                struct.pack("<i", 4 * self.atoms) + np.ascontiguousarray(axis, "<f4").tobytes()
                + struct.pack("<i", 4 * self.atoms)
                for axis in positions.T
            )
        else:
            data = self._xtc_frame(positions, self.frames, time_ps)
        self._handle.write(data)
        self.frames += 1
        if self.fmt == "dcd":
            _write_dcd_count(self._handle, self.frames)

    def _xtc_frame(self, positions: np.ndarray, step: int, time_ps: float) -> bytes:
        from mdtraj.formats import XTCTrajectoryFile

        scratch = self.path.with_name(f".{self.path.name}.frame")
        try:
            try:
                with XTCTrajectoryFile(str(scratch), "w") as writer:
                    writer.write(positions[None] / 10.0, time=np.array([time_ps], np.float32),
                                 step=np.array([step], np.int32))
            except (RuntimeError, TypeError) as error:  # mdtraj's report of a failed write
                raise OSError(errno.EIO, f"could not write an XTC frame ({error!r}; is the "
                              "disk full?)", str(scratch)) from error
            return scratch.read_bytes()
        finally:
            scratch.unlink(missing_ok=True)

    def flush(self) -> None:
        """Hand the frames written so far to the operating system."""
        self._handle.flush()

    def close(self) -> None:
        """Close the file."""
        self._handle.close()
