"""What the commands print and write: summary tables, JSON results, run folders."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

from workbench.cli.errors import UsageError
from workbench.files import atomic_write_json, output_lock
from workbench.md.reporters import ensure_writable_folder
from workbench.runner import existing_run_files

#: The lock file of an output folder (`workbench.files.output_lock`).
FOLDER_LOCK = "workbench.lock"


def summary_table(rows: list[tuple[str, str]]) -> str:
    """Rows of ``(name, value)`` as an aligned two-column table between rules."""
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 3 + max(len(v) for _, v in rows))
    return "\n".join([line, *(f"{k:<{width}} | {v}" for k, v in rows), line])


def acceptance_text(acceptance: dict[str, float | None]) -> str:
    """``"300–346 K 42%, 346–400 K 40%"`` from a ``summary()["acceptance"]`` dict."""
    return ", ".join(
        f"{pair} {'n/a' if rate is None else f'{rate:.0%}'}" for pair, rate in acceptance.items()
    )


def print_json(result: dict, out: str | None = None) -> None:
    """Print ``result`` as indented JSON and, with ``out``, write it there atomically."""
    print(json.dumps(result, indent=2))
    if out is not None:
        atomic_write_json(out, result)


def folder_lock(folder: str | None, what: str = "run folder") -> contextlib.AbstractContextManager:
    """The lock of an output folder (created first), held while a command writes there;
    nothing is locked without a folder."""
    if folder is None:
        return contextlib.nullcontext()
    return output_lock(ensure_writable_folder(folder) / FOLDER_LOCK, f"{what} {folder}")


def refuse_existing(paths: list[Path], overwrite: bool) -> None:
    """Refuse to replace any of ``paths`` that exists unless ``overwrite``."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not overwrite:
        raise UsageError(f"{', '.join(existing)} already exist(s); pass --overwrite to replace")


def prepare_output(args, resume_from: str = "checkpoint.pt") -> Path | None:
    """The run's output folder ``args.out`` (or None), refusing to overwrite an earlier run
    unless ``args.overwrite`` or ``args.resume``; ``resume_from`` must exist in it for
    ``args.resume``. With ``args.overwrite`` (and no resume) the earlier run's files and
    trajectories are removed, so none of them is left behind."""
    if args.out is None:
        if args.resume:
            raise UsageError("--resume needs --out, the folder of the run to continue")
        return None
    out = ensure_writable_folder(args.out)
    earlier = existing_run_files(out)
    if earlier and not (args.overwrite or args.resume):
        names = ", ".join(p.name for p in earlier)
        raise UsageError(
            f"{out} already holds a run ({names}); pass --overwrite to replace it or "
            "--resume to continue it"
        )
    if args.resume and not (out / resume_from).exists():
        raise UsageError(f"--resume: no {resume_from} in {out}")
    if not args.resume:
        for path in earlier:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
    return out
