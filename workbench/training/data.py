"""Teacher data: frames and forces sampled with the teacher, saved compactly.

A data set is a dict ``{"positions": (M, n, 3), "forces": (M, n, 3), "temperature": (M,)}``
of float32 tensors (Å, kcal/mol/Å, K), optionally with ``"sampled"`` (M,) bool: frames
whose positions another potential sampled (the model being trained, say) and whose forces
the teacher labelled. Such frames are trained on but not used to fit priors, since they
are not the teacher's Boltzmann ensemble. On disk it is a ``torch.save`` archive with a
format tag and a JSON metadata string, written atomically and read back with
``weights_only=True``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from workbench.files import atomic_save
from workbench.model.potential import Potential
from workbench.system.cg_system import CGSystem
from workbench.teacher import langevin_simulation

FORMAT = "cg-workbench-teacher-data"
KEYS = ("positions", "forces", "temperature")


def generate_teacher_data(
    system: CGSystem,
    teacher: Potential,
    temperatures: Sequence[float],
    replicas: int,
    steps: int,
    save_every: int,
    device: str | torch.device = "cpu",
    seed: int = 0,
    equilibration: int = 0,
    progress: bool = False,
    sampler: Potential | None = None,
    starts: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Sample frames with Langevin dynamics and label them with the teacher's forces.

    ``replicas`` replicas per temperature run together from the native structure (or from
    ``starts``); after
    ``equilibration`` steps a frame of every live replica is kept every ``save_every``
    steps. The dynamics are the teacher's own (the forces kept are those the integrator
    computed), or ``sampler``'s: then the teacher's forces are evaluated at the kept
    positions and the frames are marked ``sampled``. Training on where a model actually
    goes, labelled by the teacher, corrects states the teacher's own frames never reach.

    Parameters
    ----------
    system : CGSystem
    teacher : Potential
    temperatures : sequence of float
        Kelvin.
    replicas : int
        Replicas per temperature.
    steps : int
        Production steps after equilibration.
    save_every : int
    device : str or torch.device
    seed : int
    equilibration : int
        Steps run before the first frame is kept.
    progress : bool
        Show a tqdm bar.
    sampler : Potential, optional
        Potential whose dynamics sample the positions (default: the teacher's).
    starts : torch.Tensor, shape (S, n, 3), float32, optional
        Starting structures (say, where a long run of the model ended): replica ``r`` of
        every temperature starts from ``starts[r mod S]``. Default: the native structure.

    Returns
    -------
    dict
        ``positions`` (M, n, 3), ``forces`` (M, n, 3), ``temperature`` (M,), float32 on
        the CPU; ``M = replicas × len(temperatures) × (steps // save_every)`` less frames
        of replicas frozen by the safety checks; with a ``sampler``, ``sampled`` (M,) True.
    """
    if replicas < 1 or steps < save_every or save_every < 1:
        raise ValueError(
            f"need replicas >= 1 and steps >= save_every >= 1, got replicas={replicas}, "
            f"steps={steps}, save_every={save_every}"
        )
    per_replica = torch.tensor([float(t) for t in temperatures]).repeat_interleave(replicas)
    if starts is None:
        first = system.native_positions.expand(per_replica.shape[0], -1, -1)
    elif starts.ndim != 3 or starts.shape[1:] != (system.n_beads, 3) or starts.shape[0] < 1:
        raise ValueError(
            f"starting structures of {system.name} must have shape (S, {system.n_beads}, 3), "
            f"got {tuple(starts.shape)}"
        )
    else:
        first = starts[torch.arange(replicas) % starts.shape[0]].repeat(len(temperatures), 1, 1)
    sim = langevin_simulation(system, sampler or teacher, per_replica, first, device, seed)
    labeller = teacher.to(sim.device) if sampler is not None else None
    sim.step(equilibration)
    frames: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    label = "sampler" if sampler is not None else "teacher"
    for _ in tqdm(range(steps // save_every), disable=not progress, desc=label, unit="frame"):
        sim.step(save_every)
        forces = sim.forces
        if labeller is not None:
            forces = labeller.energy_and_forces(sim.positions, None)[1]
        frames.append((sim.positions.cpu(), forces.cpu(), sim.frozen.cpu()))
    live = ~frames[-1][2]
    data = {
        "positions": torch.cat([p[live] for p, _, _ in frames]).float(),
        "forces": torch.cat([f[live] for _, f, _ in frames]).float(),
        "temperature": per_replica[live].repeat(len(frames)).float(),
    }
    if sampler is not None:
        data["sampled"] = torch.ones(data["temperature"].shape[0], dtype=torch.bool)
    return data


def without_violent_frames(
    data: dict[str, torch.Tensor], max_force: float
) -> tuple[dict[str, torch.Tensor], int]:
    """A data set less the frames where a force on some bead exceeds ``max_force``.

    A sampler that drifts into overlapping beads hands the teacher frames whose forces
    reach 10⁴–10⁸ kcal/mol/Å (a 12–10 contact at a quarter of its native distance, say).
    One such frame would outweigh every other in a squared force error, so such frames
    are left out of training, and counted; the frames on the way there, where the
    teacher's walls are steep but finite, stay.

    Parameters
    ----------
    data : dict
        A data set (module docstring); ``forces`` (M, n, 3) float32, kcal/mol/Å.
    max_force : float
        Largest force norm on one bead kept, kcal/mol/Å; ``inf`` keeps every frame.

    Returns
    -------
    dict
        The frames kept, every key filtered alike.
    int
        Frames left out.
    """
    if not max_force > 0:
        raise ValueError(f"max_force must be positive, got {max_force}")
    keep = data["forces"].norm(dim=-1).amax(dim=-1) <= max_force
    return {key: value[keep] for key, value in data.items()}, int((~keep).sum())


def concatenate_data(*parts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One data set from several (frames in order; ``sampled`` False where a part has none)."""
    merged = {k: torch.cat([p[k] for p in parts]) for k in KEYS}
    if any("sampled" in p for p in parts):
        merged["sampled"] = torch.cat([sampled_mask(p) for p in parts])
    return merged


def data_temperatures(data: dict[str, torch.Tensor]) -> list[float]:
    """The distinct temperatures of a data set's frames, K, ascending (rounded to 1 mK)."""
    return sorted({round(float(t), 3) for t in data["temperature"]})


def sampled_mask(data: dict[str, torch.Tensor]) -> torch.Tensor:
    """Which frames another potential sampled, shape (M,) bool (none without the key)."""
    return data.get("sampled", torch.zeros(data["temperature"].shape[0], dtype=torch.bool))


def save_teacher_data(
    data: dict[str, torch.Tensor], path: str | os.PathLike, metadata: dict | None = None
) -> Path:
    """Write a data set (float32) and its metadata atomically."""
    payload = {k: data[k].detach().cpu().float().contiguous() for k in KEYS}
    payload["sampled"] = sampled_mask(data).cpu()
    payload["format"] = FORMAT
    payload["metadata"] = json.dumps(metadata or {})
    return atomic_save(payload, path)


def load_teacher_data(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict]:
    """Read a data set written by :func:`save_teacher_data`: (data, metadata)."""
    payload = torch.load(Path(path), map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} file")
    data = {k: payload[k] for k in KEYS}
    if "sampled" in payload and payload["sampled"].any():
        data["sampled"] = payload["sampled"]
    return data, json.loads(payload["metadata"])


def split_indices(
    count: int, validation_fraction: float, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random disjoint training and validation frame indices.

    Returns
    -------
    train, validation : torch.Tensor, int64
        At least one frame in each.
    """
    if count < 2 or not 0.0 < validation_fraction < 1.0:
        raise ValueError(
            f"need at least 2 frames and 0 < validation fraction < 1, got {count} frames "
            f"and {validation_fraction}"
        )
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    n_val = min(count - 1, max(1, round(validation_fraction * count)))
    return order[n_val:], order[:n_val]
