"""What a resumed run may change: its settings checked against the run folder's manifest.

A run folder's ``run.json`` (`workbench.run_folder.write_manifest`) records the settings
the run was started with and a fingerprint of its model's numbers. A resume compares
them with its own:

* :data:`FIXED` settings shape the folder or the starting state and never change;
* :data:`PHYSICS` settings change the trajectory a run follows; a resume that changes
  them is refused unless asked to continue with the new settings, and the change is then
  recorded in the manifest (:func:`record_changes`).
"""

from __future__ import annotations

import hashlib

from workbench.files import atomic_write_json
from workbench.model.potential import Potential
from workbench.run_folder import MANIFEST, settings_record

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
        settings that differ; ``model`` also differs when the model's numbers do.
    """
    recorded, new = manifest["settings"], settings_record(settings)
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
