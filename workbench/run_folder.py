"""A run folder read back: what ``workbench run`` writes, for replay and analysis.

Layout of a run folder:

* ``run.json``: the manifest, written when the run starts (:func:`write_manifest`):
  the settings, the system (name, mapping, beads), the SchNet cutoff and the steps
  between trajectory frames; ``workbench run`` adds the trajectory format, its model's
  SHA-256 and, after a resume with new settings, what changed at which step.
* ``metrics.csv`` (or ``metrics.csv.gz``): one row per replica at every save
  (:data:`workbench.md.reporters.METRIC_COLUMNS`).
* ``trajectory/``: ``topology.pdb`` and one ``replica_NNN.{dcd,xtc,h5}`` per replica,
  a frame at every save.
* ``exchanges.csv`` for a run with a temperature ladder (whose exchange state is saved
  inside ``checkpoint.pt``).
* ``checkpoint.pt``: the state at the last save; the records above are cut back to it
  when the run is resumed (`workbench.resume`).
* ``summary.json``, written when the run ends; its absence means the run is still going
  (or was killed).
* ``workbench.lock`` while a process writes the folder (`workbench.files.output_lock`).

:func:`read_run` reads a finished or running folder; :func:`thin_run` writes a smaller
copy (some replicas, every k-th frame) that keeps the same layout.
"""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from workbench.files import atomic_write_json
from workbench.system import build_system
from workbench.system.cg_system import CGSystem

#: The manifest's file name.
MANIFEST = "run.json"
#: Version of the manifest's layout.
MANIFEST_FORMAT = 1
#: Trajectory formats, by file suffix.
TRAJECTORY_SUFFIXES = ("dcd", "xtc", "h5")


#: Recorded runs that ship with the package (see ``workbench/recorded/README.md``).
RECORDED = Path(__file__).resolve().parent / "recorded"


class RunFolderError(ValueError):
    """A folder that is not a readable run, with what is missing or damaged."""


def recorded_run(name: str = "1enh-unfolding") -> Path:
    """The folder of a recorded run that ships with the package, e.g. ``1enh-unfolding``
    (1ENH unfolding at 450 K with its shipped model; ``workbench/recorded/README.md`` says
    how it was made).

    Raises
    ------
    RunFolderError
        No recorded run of that name (the message lists those there are).
    """
    folder = RECORDED / name
    if not (folder / MANIFEST).is_file():
        names = sorted(p.name for p in RECORDED.iterdir() if (p / MANIFEST).is_file())
        raise RunFolderError(f"no recorded run {name!r}; there are: {', '.join(names)}")
    return folder


def metrics_file(folder: str | Path) -> Path:
    """The metrics CSV of the run folder ``folder``, or ``folder`` itself where it is a file.

    ``metrics.csv`` where it is there, else ``metrics.csv.gz`` (runs kept in the
    repository are gzipped, some as a file of their own: ``<model>.teacher-run.csv.gz``);
    FileNotFoundError naming the folder where neither is.
    """
    if Path(folder).is_file():
        return Path(folder)
    for name in ("metrics.csv", "metrics.csv.gz"):
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    raise FileNotFoundError(f"no metrics.csv or metrics.csv.gz in {folder}")


def metrics_table(path: str | Path) -> dict[str, np.ndarray]:
    """Every column of a metrics CSV, one row per save and one column per replica.

    Parameters
    ----------
    path : str or Path
        ``metrics.csv`` written by ``workbench run`` or that file gzipped (``.gz``). A
        resumed run's repeated (step, replica) rows count once (the last wins). A row
        cut short by a crash (the file's last line) is left out.

    Returns
    -------
    dict of str to numpy.ndarray
        ``step`` (T,) int64 and ``replica`` (R,) int64; every other column of the file
        (at least ``time_ps``) as float64 of shape (T, R).

    Raises
    ------
    RunFolderError
        No rows, or a save that lacks some replica's row.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as handle:
        reader = csv.DictReader(handle)
        columns = [c for c in reader.fieldnames or () if c not in ("step", "replica")]
        rows = {
            (int(r["step"]), int(r["replica"])): r
            for r in reader
            if None not in r.values() and all(r[c] not in ("", None) for c in columns)
        }
    if not rows:
        raise RunFolderError(f"{path} holds no metrics rows")
    steps = sorted({step for step, _ in rows})
    replicas = sorted({replica for _, replica in rows})
    missing = len(steps) * len(replicas) - len(rows)
    if missing:
        raise RunFolderError(f"{path}: {missing} (step, replica) rows are missing")
    table = {"step": np.array(steps, dtype=np.int64), "replica": np.array(replicas)}
    for column in columns:
        table[column] = np.array(
            [[float(rows[s, r][column]) for r in replicas] for s in steps], dtype=np.float64
        )
    return table


def settings_record(settings) -> dict:
    """``settings`` (a RunSettings) as a manifest records them, in JSON types."""
    record = asdict(settings)
    record["options"] = settings.options.to_dict()
    return json.loads(json.dumps(record))


def write_manifest(
    folder: str | Path,
    settings,
    system: CGSystem,
    cutoff: float,
    frame_interval: int | None = None,
    extra: dict | None = None,
) -> Path:
    """Write ``run.json`` into ``folder``: what a replay needs to know about the run.

    Parameters
    ----------
    folder : str or Path
    settings : RunSettings
        As the run was started (kernel switches included).
    system : CGSystem
    cutoff : float
        SchNet graph radius, Å (the adjacency a replay draws).
    frame_interval : int, optional
        Steps between trajectory frames; ``settings.save_interval`` by default.
    extra : dict, optional
        More keys (a thinned copy says what it was made from).
    """
    manifest = {
        "format": MANIFEST_FORMAT,
        "system": {
            "name": system.name,
            "structure": settings.protein,
            "mapping": system.mapping,
            "beads": system.n_beads,
            "sequence": list(system.residue_names),
        },
        "cutoff": float(cutoff),
        "frame_interval": int(frame_interval or settings.save_interval),
        "settings": settings_record(settings),
        **(extra or {}),
    }
    return atomic_write_json(Path(folder) / MANIFEST, manifest)


def read_manifest(folder: str | Path) -> dict:
    """The manifest of a run folder.

    Raises
    ------
    RunFolderError
        No ``run.json`` (runs written before manifests existed: their ``summary.json``
        names the protein but not the cutoff or frame spacing), or a damaged one.
    """
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise RunFolderError(
            f"{folder} has no {MANIFEST}: not a run folder, or written by a version that "
            "did not record its settings"
        )
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunFolderError(f"{path} is damaged: {exc}") from exc
    if manifest.get("format") != MANIFEST_FORMAT:
        raise RunFolderError(f"{path}: unknown manifest format {manifest.get('format')!r}")
    return manifest


def trajectory_files(folder: str | Path) -> list[Path]:
    """The per-replica trajectory files of a run folder, in replica order (may be empty)."""
    trajectory = Path(folder) / "trajectory"
    for suffix in TRAJECTORY_SUFFIXES:
        files = sorted(trajectory.glob(f"replica_*.{suffix}"))
        if files:
            return files
    return []


def _trajectory_file(path: Path):
    """mdtraj's reader of one trajectory file (DCD, XTC or HDF5), by suffix."""
    from workbench.md.reporters import _mdtraj

    formats = _mdtraj().formats
    opener = {
        "dcd": formats.DCDTrajectoryFile,
        "xtc": formats.XTCTrajectoryFile,
        "h5": formats.HDF5TrajectoryFile,
    }[path.suffix.lstrip(".")]
    return opener(str(path))


def _frame_count(path: Path) -> int:
    with _trajectory_file(path) as handle:
        return len(handle)


def _read_frames(path: Path, stride: int) -> np.ndarray:
    """Every ``stride``-th frame of one trajectory file, Å, shape (F, n, 3) float32."""
    with _trajectory_file(path) as handle:
        frames = handle.read(stride=stride)
    if path.suffix == ".dcd":
        return np.asarray(frames[0], dtype=np.float32)  # Å
    xyz = frames.coordinates if path.suffix == ".h5" else frames[0]
    return np.asarray(xyz * 10.0, dtype=np.float32)  # nm to Å


@dataclass(frozen=True)
class RecordedRun:
    """A run folder read into memory.

    Attributes
    ----------
    folder : Path
    manifest : dict
    system : CGSystem
    cutoff : float
        Å.
    metrics : dict of str to numpy.ndarray
        :func:`metrics_table` of the folder.
    frame_steps : numpy.ndarray, shape (F,), int64
        Step of each held frame.
    frames : numpy.ndarray, shape (F, R, n, 3), float32
        Bead positions, Å (every ``frame_stride``-th frame of the files).
    frame_stride : int
    summary : dict or None
        ``summary.json`` (None while the run goes on).
    exchanges : dict of str to numpy.ndarray or None
        Columns of ``exchanges.csv`` for a run with a ladder.
    """

    folder: Path
    manifest: dict
    system: CGSystem
    cutoff: float
    metrics: dict
    frame_steps: np.ndarray
    frames: np.ndarray
    frame_stride: int
    summary: dict | None
    exchanges: dict | None

    @property
    def finished(self) -> bool:
        """True once the run wrote its summary."""
        return self.summary is not None

    @property
    def replicas(self) -> int:
        """Replicas with a trajectory."""
        return int(self.frames.shape[1])


def _system_of(manifest: dict) -> CGSystem:
    system = manifest["system"]
    built = build_system(system["structure"], system["mapping"])
    if built.n_beads != system["beads"]:
        raise RunFolderError(
            f"the run was made for {system['beads']} beads of {system['structure']!r}; "
            f"that structure now gives {built.n_beads}"
        )
    return built


def _read_exchanges(path: Path) -> dict | None:
    if not path.is_file():
        return None
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        rows = [row for row in reader if header and len(row) == len(header)]
    if not header or not rows:
        return None
    values = np.array(rows, dtype=np.int64)
    return {name: values[:, k] for k, name in enumerate(header)}


def read_run(folder: str | Path, max_frames: int = 400) -> RecordedRun:
    """Read a run folder, finished or still being written.

    Parameters
    ----------
    folder : str or Path
    max_frames : int
        Bound on held frames: every k-th frame is read, with k the smallest stride that
        keeps at most this many.

    Raises
    ------
    RunFolderError
        No manifest, no metrics, no trajectory, or trajectories that disagree.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise RunFolderError(f"{folder} is not a folder")
    manifest = read_manifest(folder)
    system = _system_of(manifest)
    try:
        metrics = metrics_table(metrics_file(folder))
    except FileNotFoundError as exc:
        raise RunFolderError(str(exc)) from exc
    files = trajectory_files(folder)
    if not files:
        raise RunFolderError(f"{folder} holds no trajectory (run with trajectories to replay)")
    counts = [_frame_count(path) for path in files]
    total = min(counts)  # a run still writing may be a frame ahead in some files
    stride = max(1, -(-total // max_frames))
    frames = np.stack([_read_frames(path, stride)[: -(-total // stride)] for path in files], 1)
    if frames.shape[2] != system.n_beads:
        raise RunFolderError(
            f"trajectories hold {frames.shape[2]} beads, the system {system.n_beads}"
        )
    interval = int(manifest["frame_interval"])
    frame_steps = (np.arange(frames.shape[0], dtype=np.int64) * stride + 1) * interval
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    return RecordedRun(
        folder=folder,
        manifest=manifest,
        system=system,
        cutoff=float(manifest["cutoff"]),
        metrics=metrics,
        frame_steps=frame_steps,
        frames=frames,
        frame_stride=stride,
        summary=summary,
        exchanges=_read_exchanges(folder / "exchanges.csv"),
    )


def thin_run(
    source: str | Path,
    target: str | Path,
    replicas: list[int] | None = None,
    stride: int = 1,
    fmt: str = "xtc",
    overwrite: bool = False,
) -> Path:
    """Write a smaller copy of a finished run: some replicas, every ``stride``-th frame.

    The copy has the same layout (manifest, metrics of the kept replicas renumbered from
    0 and gzipped, trajectories, summary) and replays like the original; its manifest
    records what it was made from.

    Parameters
    ----------
    source, target : str or Path
    replicas : list of int, optional
        Replicas to keep (all by default).
    stride : int
        Keep frames ``stride - 1, 2 stride - 1, ...`` (steps ``stride × interval``, ...).
    fmt : {"dcd", "xtc", "h5"}
        Trajectory format of the copy (XTC is about a third of DCD's size).
    overwrite : bool
        Replace an existing ``target``.

    Raises
    ------
    RunFolderError
        ``target`` exists without ``overwrite``, ``source`` is not a finished run, or a
        replica or stride is out of range.
    """
    from workbench.md.reporters import _mdtraj

    source, target = Path(source), Path(target)
    if target.exists() and not overwrite:
        raise RunFolderError(f"{target} exists; pass overwrite=True to replace it")
    if fmt not in TRAJECTORY_SUFFIXES:
        raise RunFolderError(f"format must be one of {TRAJECTORY_SUFFIXES}, got {fmt!r}")
    if stride < 1:
        raise RunFolderError(f"stride must be at least 1, got {stride}")
    run = read_run(source, max_frames=10**9)
    if not run.finished:
        raise RunFolderError(f"{source} has no summary.json: thin a finished run")
    replicas = list(range(run.replicas)) if replicas is None else list(replicas)
    if not replicas or min(replicas) < 0 or max(replicas) >= run.replicas:
        raise RunFolderError(f"replicas must lie in 0..{run.replicas - 1}, got {replicas}")
    if target.exists():
        shutil.rmtree(target)
    (target / "trajectory").mkdir(parents=True)
    md = _mdtraj()
    shutil.copy(source / "trajectory" / "topology.pdb", target / "trajectory" / "topology.pdb")
    kept = run.frames[stride - 1 :: stride][:, replicas]
    interval = int(run.manifest["frame_interval"])
    timestep_ps = float(run.manifest["settings"]["timestep_fs"]) / 1000.0
    times = (np.arange(1, kept.shape[0] + 1) * stride * interval * timestep_ps).astype(np.float32)
    topology = md.load_topology(str(target / "trajectory" / "topology.pdb"))
    for new, _ in enumerate(replicas):
        trajectory = md.Trajectory(kept[:, new] / 10.0, topology, time=times)
        trajectory.save(str(target / "trajectory" / f"replica_{new:03d}.{fmt}"))
    _write_metrics(run.metrics, replicas, target / "metrics.csv.gz")
    summary = {**run.summary, **_final_state(run, replicas), "replicas": len(replicas)}
    made_from = {
        "source": source.name,
        "replicas": replicas,
        "frame_stride": stride,
        "frames": int(kept.shape[0]),
    }
    summary["thinned_from"] = made_from  # throughput and set-up figures are the source's
    atomic_write_json(target / "summary.json", summary)
    manifest = {
        **run.manifest,
        "frame_interval": stride * interval,
        "thinned_from": made_from,
    }
    manifest["settings"] = {**manifest["settings"], "replicas": len(replicas)}
    atomic_write_json(target / MANIFEST, manifest)
    return target


def _final_state(run: RecordedRun, replicas: list[int]) -> dict:
    """The summary's end-of-run figures over ``replicas`` alone, from the last metrics row:
    mean CA RMSD and Q, folded fraction (Q above the summary's ``folded_q``) and frozen
    replicas renumbered."""
    columns = [int(np.flatnonzero(run.metrics["replica"] == r)[0]) for r in replicas]
    frozen = run.metrics["frozen"][-1, columns].astype(bool)
    live = ~frozen
    q, rmsd = run.metrics["q"][-1, columns], run.metrics["rmsd"][-1, columns]
    folded_q = run.summary["folded_q"]
    renumber = {old: new for new, old in enumerate(replicas)}
    return {
        "rmsd_mean": float(rmsd[live].mean()) if live.any() else None,
        "q_mean": float(q[live].mean()) if live.any() else None,
        "folded_fraction": float((q[live] > folded_q).mean()) if live.any() else None,
        "frozen_replicas": [
            [renumber[r], step] for r, step in run.summary["frozen_replicas"] if r in renumber
        ],
    }


def _write_metrics(table: dict, replicas: list[int], path: Path) -> None:
    """Metrics rows of ``replicas`` (renumbered 0..) to a gzipped CSV, file's own columns."""
    columns = [c for c in table if c not in ("step", "replica")]
    positions = [int(np.flatnonzero(table["replica"] == r)[0]) for r in replicas]
    with gzip.open(path, "wt", newline="", compresslevel=9) as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["step", "replica", *columns])
        for t, step in enumerate(table["step"]):
            for new, column_index in enumerate(positions):
                writer.writerow(
                    [int(step), new, *(f"{table[c][t, column_index]:.6g}" for c in columns)]
                )
