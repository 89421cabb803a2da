"""Resuming a run folder: its settings checked against the manifest, its records cut back
to the checkpoint.

A run folder's ``run.json`` (`workbench.run_folder.write_manifest`) records the settings
the run was started with and a fingerprint of its model's numbers. A resume compares
them with its own:

* :data:`FIXED` settings shape the folder or the starting state and never change;
* :data:`PHYSICS` settings change the trajectory a run follows; a resume that changes
  them is refused unless asked to continue with the new settings, and the change is then
  recorded in the manifest (:func:`record_changes`).

A run writes its records (metrics rows, exchange rounds, trajectory frames) as it goes
and saves its checkpoint after them, so a run that stops between two saves leaves
records the checkpoint does not cover. Before a resume, every record file is checked
against the checkpoint's step and cut back to it, in place and without rewriting:

* ``metrics.csv``: one row per replica at every ``save_interval`` steps up to the step;
* ``exchanges.csv``: one row per exchange round the checkpoint counts;
* ``trajectory/replica_NNN.{dcd,xtc}``: one frame at every ``save_interval`` steps.

A file that holds fewer records than the checkpoint covers has lost data and cannot be
repaired: the resume is refused (:class:`RecoveryError`). ``summary.json`` describes an
ended run and is removed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from workbench.files import atomic_write_json
from workbench.md.trajectory_files import TrajectoryFileError, cut_frames
from workbench.model.potential import Potential
from workbench.run_folder import MANIFEST, settings_record


class RecoveryError(ValueError):
    """A run folder whose records do not reach its checkpoint: it cannot be resumed."""


def cut_log(path: Path, step: int, rows: int) -> int:
    """Cut a CSV log whose first column is the step back to its rows up to ``step``.

    Parameters
    ----------
    path : Path
        A header line, then rows in the order written (steps never decrease).
    step : int
        The checkpoint's step.
    rows : int
        Rows the checkpoint covers (those with a step up to ``step``).

    Returns
    -------
    int
        Rows removed (written after the checkpoint, or cut short by a crash).

    Raises
    ------
    RecoveryError
        No such file, fewer rows up to ``step`` than ``rows``, or steps out of order.
    """
    if not path.is_file():
        raise RecoveryError(f"{path} is missing; the checkpoint covers {rows} rows of it")
    kept = removed = 0
    last = -1
    with open(path, "rb") as handle:  # line by line: a long run's log is large
        header = handle.readline()
        end = len(header) if header.endswith(b"\n") else 0
        for line in handle:
            row_step = _row_step(line)
            if row_step is not None and row_step < last:
                raise RecoveryError(f"{path}: steps out of order ({last} then {row_step}); "
                                    "the file was appended to by an older version's resume")
            if row_step is None or row_step > step:
                removed += 1
                continue
            if removed:
                raise RecoveryError(f"{path}: a damaged row before step {row_step}")
            last = row_step
            kept += 1
            end += len(line)
    if kept != rows:
        raise RecoveryError(
            f"{path} holds {kept} rows up to step {step}, the checkpoint covers {rows}: "
            "records were lost, the run cannot be resumed exactly"
        )
    if removed:
        os.truncate(path, end)
    return removed


def _row_step(line: bytes) -> int | None:
    """The step of a whole row (None for a row cut short or not starting with a step)."""
    if not line.endswith(b"\n"):
        return None
    try:
        return int(line.split(b",", 1)[0])
    except ValueError:
        return None


def recover_run_folder(
    folder: Path,
    step: int,
    save_interval: int,
    replicas: int,
    rounds: int | None,
    trajectory: str | None,
) -> list[str]:
    """Check and cut back every record file of a run folder to its checkpoint.

    Parameters
    ----------
    folder : Path
    step : int
        The checkpoint's step.
    save_interval : int
        Steps between metrics rows and trajectory frames.
    replicas : int
    rounds : int or None
        Exchange rounds the checkpoint counts (None: no temperature ladder).
    trajectory : str or None
        Trajectory format of the run (None: no trajectory).

    Returns
    -------
    list of str
        What was cut, one line per file (empty when nothing was).

    Raises
    ------
    RecoveryError
        A file lost records the checkpoint covers, or cannot be cut back.
    """
    saves = step // save_interval
    notes = []
    logs = [("metrics.csv", saves * replicas)]
    if rounds is not None:
        logs.append(("exchanges.csv", rounds))
    for name, rows in logs:
        removed = cut_log(folder / name, step, rows)
        if removed:
            notes.append(f"{name}: {removed} rows after step {step} removed")
    if trajectory is not None:
        cut = 0
        for replica in range(replicas):
            path = folder / "trajectory" / f"replica_{replica:03d}.{trajectory}"
            if not path.is_file():
                raise RecoveryError(f"{path} is missing; the checkpoint covers {saves} frames")
            size = path.stat().st_size
            try:
                cut_frames(path, saves)
            except TrajectoryFileError as error:
                raise RecoveryError(f"cannot resume: {error} (the checkpoint covers {saves} "
                                    f"frames, step {step})") from None
            cut += path.stat().st_size != size
        if cut:
            notes.append(f"trajectory/: {cut} files cut back to {saves} frames")
    (folder / "summary.json").unlink(missing_ok=True)
    return notes


#: Settings a resume can never change (layout of the folder, the starting state).
FIXED = ("protein", "mapping", "replicas", "save_interval", "ladder", "seed")
#: Settings that change the physics (or the arithmetic) of the steps to come.
PHYSICS = ("timestep_fs", "temperature", "friction", "exchange_every", "model", "structures",
           "options", "neighbors")


def model_fingerprint(potential: Potential) -> str:
    """SHA-256 of a potential's tensors (names, shapes, bytes), hex."""
    digest = hashlib.sha256()
    for name, tensor in sorted(potential.state_dict().items()):
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def settings_changes(manifest: dict, settings, fingerprint: str) -> tuple[dict, dict]:
    """The fixed and the physics settings a resume would change.

    Parameters
    ----------
    manifest : dict
        The run folder's manifest.
    settings : RunSettings
        The resume's settings.
    fingerprint : str
        :func:`model_fingerprint` of the resume's potential.

    Returns
    -------
    (dict, dict)
        ``{field: (recorded, new)}`` of the :data:`FIXED` and of the :data:`PHYSICS`
        settings that differ; ``model`` also differs when the model's numbers do. A field
        of ``neighbors`` or ``options`` missing from the record (written before the field
        existed) counts as its default.
    """
    new = settings_record(settings)
    # a sub-setting the record predates (added to NeighborSettings or KernelOptions since)
    # ran as its default
    defaults = settings_record(type(settings)())
    recorded = {k: {**defaults[k], **v} if isinstance(v, dict) and isinstance(defaults.get(k),
                                                                                dict) else v
                for k, v in manifest["settings"].items()}
    fixed = {k: (recorded.get(k), new[k]) for k in FIXED if recorded.get(k) != new[k]}
    physics = {k: (recorded.get(k), new[k]) for k in PHYSICS if recorded.get(k) != new[k]}
    before = manifest.get("model_sha256")
    if before is not None and before != fingerprint and "model" not in physics:
        physics["model"] = (f"{new['model']} (sha256 {before[:12]})",
                            f"{new['model']} (sha256 {fingerprint[:12]})")
    return fixed, physics


def record_changes(folder, manifest: dict, settings, fingerprint: str, step: int,
                   changes: dict) -> None:
    """Write the manifest with the new settings and, under ``changes``, what changed at
    which step (the earlier entries kept)."""
    entry = {"step": step, "changed": {k: {"from": a, "to": b} for k, (a, b) in changes.items()}}
    updated = {**manifest, "settings": settings_record(settings), "model_sha256": fingerprint,
               "changes": [*manifest.get("changes", []), entry]}
    atomic_write_json(folder / MANIFEST, updated)
