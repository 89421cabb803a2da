"""Validation of a trained potential against its teacher.

Both are run with the same replicas, temperatures and seed; the numbers compared are
the Q histograms (intersection ≥ 0.8), the folded fractions (within 0.1), the
correlation of RMSD and Q (negative), the folding and unfolding events (counted with
hysteresis: folded above Q 0.8, unfolded below Q 0.4, or the protein's native-basin
thresholds, :func:`workbench.teacher.state_thresholds`) and the force RMSE on held-out
teacher frames. :func:`compare_runs` compares two long runs already made (``workbench
run`` of the model and of ``--model teacher``) from their metrics files, and
:func:`compare_end_structures` the two potentials at the structures where those runs
ended (a model that drifts into a basin of its own sits there far below the teacher).
:func:`energy_gaps` gives, for several models and sets of structures, the model's energy
minus the teacher's (relative to the same difference over a reference set: energies are
known up to a constant) and the force RMSE: a large negative gap at a run's ends is a
basin of the model's own. Plots need matplotlib, which is optional.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch

from workbench.files import atomic_save, atomic_write
from workbench.model.geometry import torsions
from workbench.model.options import KernelOptions
from workbench.model.potential import Potential
from workbench.neighbors import NeighborList
from workbench.run_folder import metrics_file, metrics_table
from workbench.system.cg_system import CGSystem
from workbench.teacher import FOLDED_Q, UNFOLDED_Q, langevin_simulation, state_thresholds
from workbench.training.force_matching import potential_labels

#: Pass thresholds.
MIN_INTERSECTION = 0.8
MAX_FOLDED_DIFFERENCE = 0.1
#: Folding plus unfolding events a long run must show (summed over replicas).
MIN_LONG_RUN_TRANSITIONS = 20


def histogram_intersection(a: torch.Tensor, b: torch.Tensor, bins: int = 50) -> float:
    """Overlap ``Σ min(p_a, p_b)`` of two normalised histograms on [0, 1] (1: identical).

    Parameters
    ----------
    a, b : torch.Tensor, any shape, float
        Samples in [0, 1] (e.g. Q).
    bins : int
    """
    p = torch.histc(a.double().flatten(), bins, 0.0, 1.0)
    q = torch.histc(b.double().flatten(), bins, 0.0, 1.0)
    return float(torch.minimum(p / p.sum(), q / q.sum()).sum())


def folded_fraction(q: torch.Tensor, threshold: float = FOLDED_Q) -> float:
    """Fraction of samples with Q above ``threshold``."""
    return float((q > threshold).double().mean())


def count_transitions(
    q: torch.Tensor, folded: float = FOLDED_Q, unfolded: float = UNFOLDED_Q
) -> tuple[int, int]:
    """Folding and unfolding events with hysteresis.

    A trajectory's state changes only when Q crosses the far threshold: to folded when
    ``Q > folded``, to unfolded when ``Q < unfolded``; its first state is the first
    of these it reaches. Every later change is an event.

    Parameters
    ----------
    q : torch.Tensor, shape (T,) or (R, T), float
        Q time series, one row per replica.
    folded, unfolded : float

    Returns
    -------
    (int, int)
        Folding events (unfolded → folded) and unfolding events, summed over replicas.
    """
    q = q.reshape(-1, q.shape[-1]).double()
    state = torch.zeros(q.shape[0], dtype=torch.long)  # 0 unknown, 1 folded, −1 unfolded
    folding = unfolding = 0
    for column in q.T:
        new = torch.where(column > folded, 1, torch.where(column < unfolded, -1, state))
        folding += int(((state == -1) & (new == 1)).sum())
        unfolding += int(((state == 1) & (new == -1)).sum())
        state = new
    return folding, unfolding


def run_states(path: str | Path, basin: tuple[float, float] | None = None) -> dict:
    """Populations, events and Q histogram of one run, to calibrate a teacher in long runs.

    Parameters
    ----------
    path : str or Path
        A ``workbench run`` output folder or its metrics (`metrics_file`).
    basin : (float, float), optional
        Thresholds ``(high, low)`` of a native basin that sits below ``FOLDED_Q`` (a teacher
        whose contacts breathe at 300 K): adds ``basin_fraction`` (Q > high) and
        ``basin_events`` (folding, unfolding) counted with these thresholds.

    Returns
    -------
    dict
        ``run``, ``replicas``, ``saves``, ``time_ps``; ``folded`` (Q > ``FOLDED_Q``) and
        ``unfolded`` (Q < ``UNFOLDED_Q``) fractions and ``mean_q`` over all replicas and
        saves; ``folding_events`` and ``unfolding_events`` (`count_transitions`);
        ``q_histogram``, counts in ten bins of 0.1 over [0, 1]. A two-state protein shows
        two separated peaks, a downhill one a single broad peak.
    """
    path = Path(path)
    q, _, time_ps = series_from_metrics(metrics_file(path))
    folding, unfolding = count_transitions(q)
    histogram = torch.histc(q.double(), bins=10, min=0.0, max=1.0)
    states = {
        "run": str(path), "replicas": q.shape[0], "saves": q.shape[1], "time_ps": time_ps,
        "folded": folded_fraction(q), "unfolded": float((q < UNFOLDED_Q).double().mean()),
        "mean_q": float(q.double().mean()), "folding_events": folding,
        "unfolding_events": unfolding, "q_histogram": [int(c) for c in histogram.tolist()],
    }
    if basin is not None:
        high, low = basin
        if not 0.0 <= low < high <= 1.0:
            raise ValueError(f"basin thresholds must satisfy 0 <= low < high <= 1, got {basin}")
        states["basin"] = [high, low]
        states["basin_fraction"] = float((q > high).double().mean())
        states["basin_events"] = list(count_transitions(q, high, low))
    return states


def pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson correlation of two equally long sample sets (NaN if one is constant)."""
    x, y = x.double().flatten(), y.double().flatten()
    x, y = x - x.mean(), y - y.mean()
    denominator = float(torch.linalg.vector_norm(x) * torch.linalg.vector_norm(y))
    return float((x * y).sum()) / denominator if denominator > 0 else math.nan


def force_rmse(predicted: torch.Tensor, reference: torch.Tensor) -> float:
    """Root-mean-square difference per force component, kcal/mol/Å."""
    return float((predicted.double() - reference.double()).square().mean().sqrt())


def sample_q_rmsd(
    system: CGSystem,
    potential: Potential,
    temperatures: Sequence[float],
    replicas: int,
    steps: int,
    save_every: int,
    device: str | torch.device = "cpu",
    seed: int = 0,
    options: KernelOptions | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Q and CA RMSD time series of ``replicas`` runs per temperature from the native state.

    ``options`` selects the force path (default: the fastest on ``device``).

    Returns
    -------
    q, rmsd : torch.Tensor, shape (len(temperatures), replicas, steps // save_every), float32
    """
    per_replica = torch.tensor([float(t) for t in temperatures]).repeat_interleave(replicas)
    native = system.native_positions.expand(per_replica.shape[0], -1, -1)
    sim = langevin_simulation(
        system, potential, per_replica, native, device, seed, options=options
    )
    q, rmsd = [], []
    for _ in range(steps // save_every):
        sim.step(save_every)
        metrics = sim.metrics()
        q.append(metrics["q"].float().cpu())
        rmsd.append(metrics["rmsd"].float().cpu())
    shape = (len(temperatures), replicas, -1)
    return torch.stack(q, -1).reshape(shape), torch.stack(rmsd, -1).reshape(shape)


def compare_q(
    q_teacher: torch.Tensor,
    q_model: torch.Tensor,
    rmsd_model: torch.Tensor,
    states: tuple[float, float] = (FOLDED_Q, UNFOLDED_Q),
) -> dict:
    """Validation numbers of one temperature.

    Parameters
    ----------
    q_teacher : torch.Tensor, shape (R, T), float
    q_model, rmsd_model : torch.Tensor, shape (R, T), float
    states : (float, float)
        Q thresholds (folded, unfolded) of the folded fractions and the events
        (:func:`workbench.teacher.state_thresholds` of the protein).

    Returns
    -------
    dict
        ``q_intersection``, ``folded_teacher``, ``folded_model``, ``rmsd_q_correlation``,
        ``events_teacher`` and ``events_model`` (folding, unfolding), ``states`` (the
        thresholds), ``passes``.
    """
    folded, unfolded = states
    intersection = histogram_intersection(q_teacher, q_model)
    folded_t, folded_m = folded_fraction(q_teacher, folded), folded_fraction(q_model, folded)
    correlation = pearson(rmsd_model, q_model)
    return {
        "q_intersection": intersection,
        "folded_teacher": folded_t,
        "folded_model": folded_m,
        "rmsd_q_correlation": correlation,
        "events_teacher": count_transitions(q_teacher, folded, unfolded),
        "events_model": count_transitions(q_model, folded, unfolded),
        "states": [folded, unfolded],
        "passes": {
            "q_intersection": intersection >= MIN_INTERSECTION,
            "folded_fraction": abs(folded_t - folded_m) <= MAX_FOLDED_DIFFERENCE,
            "rmsd_q_anticorrelated": correlation < 0,
        },
    }


def series_from_metrics(path: str | Path) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Q and CA RMSD of every replica at every save of a run's metrics CSV.

    Parameters
    ----------
    path : str or Path
        ``metrics.csv`` written by ``workbench run`` (rows of step and replica; a resumed
        run's repeated rows count once), or that file gzipped (``.gz``).

    Returns
    -------
    q, rmsd : torch.Tensor, shape (R, T), float32
    time_ps : float
        Simulated time of the last save.
    """
    table = metrics_table(path)
    q = torch.tensor(table["q"].T, dtype=torch.float32)
    rmsd = torch.tensor(table["rmsd"].T, dtype=torch.float32)
    return q, rmsd, float(table["time_ps"][-1, 0])


def _both_states(q: torch.Tensor, states: tuple[float, float]) -> bool:
    """Whether Q samples (any shape) hold folded and unfolded ones (thresholds ``states``)."""
    return bool((q > states[0]).any() and (q < states[1]).any())


def compare_runs(
    model_metrics: str | Path,
    teacher_metrics: str | Path,
    states: tuple[float, float] = (FOLDED_Q, UNFOLDED_Q),
) -> dict:
    """Validation numbers of a long model run against a teacher run (their metrics CSVs).

    ``states`` are the Q thresholds (folded, unfolded) of :func:`compare_q`.

    Returns
    -------
    dict
        :func:`compare_q`'s numbers and passes, plus ``replicas``, ``saves`` and
        ``time_ps`` of the model run, the two paths, and, where the teacher run has them
        (a fast folder; a protein that stays folded has neither), the passes
        ``transitions`` (at least :data:`MIN_LONG_RUN_TRANSITIONS` folding plus unfolding
        events) and ``both_states`` (samples folded and unfolded, by ``states``).
    """
    q_model, rmsd_model, time_ps = series_from_metrics(model_metrics)
    q_teacher, _, _ = series_from_metrics(teacher_metrics)
    result = compare_q(q_teacher, q_model, rmsd_model, states)
    if sum(result["events_teacher"]) >= MIN_LONG_RUN_TRANSITIONS:
        result["passes"]["transitions"] = sum(result["events_model"]) >= MIN_LONG_RUN_TRANSITIONS
    if _both_states(q_teacher, states):
        result["passes"]["both_states"] = _both_states(q_model, states)
    return {
        "model_run": str(model_metrics),
        "teacher_run": str(teacher_metrics),
        "replicas": int(q_model.shape[0]),
        "saves": int(q_model.shape[1]),
        "time_ps": time_ps,
        **result,
    }


def flipped_dihedral_fraction(system: CGSystem, positions: torch.Tensor) -> float:
    """Share of the system's dihedrals more than 90° from their native values.

    Parameters
    ----------
    system : CGSystem
    positions : torch.Tensor, shape (R, n, 3), float32
        Structures, Å.

    Returns
    -------
    float
        Over all ``R × D`` dihedrals of ``system.dihedrals`` (shape (D, 4)): backbone flips
        that a loose native-like state can hide behind a native-like Q.
    """
    native = torsions(system.native_positions[None].double(), system.dihedrals)
    phi = torsions(positions.double().cpu(), system.dihedrals)
    return float((torch.cos(phi - native) < 0.0).double().mean())


def relaxation(
    system: CGSystem,
    potential: Potential,
    starts: torch.Tensor,
    times_ps: Sequence[float],
    temperature: float = 300.0,
    device: str | torch.device = "cpu",
    seed: int = 0,
    timestep_fs: float = 4.0,
    teacher: Potential | None = None,
) -> list[dict]:
    """What a potential does with given structures: Q and flipped dihedrals over time.

    Run from the ends of a model run that drifted, the teacher shows whether it leaves that
    state and how fast (a loose state of an earlier 1YRF model: 14.5 % of dihedrals flipped,
    0.8 % after 2 ps of the teacher); a model that keeps the state does not.

    Parameters
    ----------
    system : CGSystem
    potential : Potential
    starts : torch.Tensor, shape (R, n, 3), float32
        Starting structures, Å (say, :func:`~workbench.md.simulation.checkpoint_positions`).
    times_ps : sequence of float
        Increasing times (ps) at which to measure; each is rounded to whole steps.
    temperature, device, seed, timestep_fs
        Langevin run settings (friction 1/ps).
    teacher : Potential, optional
        The teacher of a model being run: each row then also holds the teacher's largest
        force on one bead (kcal/mol/Å), its median over the replicas
        (``teacher_force_median``) and the largest (``teacher_force_max``). A model that
        falls into a hole of its own makes beads overlap, and those forces climb from the
        teacher's thermal ~50–100 to 10⁴–10⁸ within picoseconds (1YRF,
        docs/decisions/0009-force-error-does-not-select-models.md).

    Returns
    -------
    list of dict
        One row for the start and one per time: ``time_ps``, ``q_mean`` and
        ``folded_fraction`` (the protein's folded threshold) over the replicas not frozen,
        and ``flipped_dihedrals`` (:func:`flipped_dihedral_fraction`).
    """
    points = [0.0, *times_ps]
    if any(b <= a for a, b in zip(points[:-1], points[1:], strict=True)):
        raise ValueError(f"times must be positive and increasing, got {list(times_ps)}")
    folded_q = state_thresholds(system.name)[0]
    sim = langevin_simulation(system, potential, temperature, starts, device, seed,
                              timestep_fs=timestep_fs)
    labeller = None if teacher is None else teacher.to(sim.device)
    rows = []
    for time_ps in points:
        sim.step(round(time_ps * 1000.0 / timestep_fs) - sim.step_count)
        live = ~sim.frozen
        q = sim.native_q()[live].float().cpu()
        row = {
            "time_ps": sim.step_count * timestep_fs / 1000.0,
            "q_mean": float(q.mean()),
            "folded_fraction": folded_fraction(q, folded_q),
            "flipped_dihedrals": flipped_dihedral_fraction(system, sim.positions[live]),
        }
        if labeller is not None:
            forces = labeller.energy_and_forces(sim.positions[live], None)[1]
            largest = forces.norm(dim=-1).amax(dim=-1).cpu()
            row["teacher_force_median"] = float(largest.median())
            row["teacher_force_max"] = float(largest.max())
        rows.append(row)
    return rows


def compare_end_structures(
    system: CGSystem,
    model: Potential,
    teacher: Potential,
    model_positions: torch.Tensor,
    teacher_positions: torch.Tensor,
) -> dict:
    """Model against teacher at the structures where a model run and a teacher run ended.

    Energies are known up to a constant, so the model's energy minus the teacher's is
    taken relative to its mean over the teacher run's structures (the teacher's own
    ensemble). A large negative ``energy_gap`` at the model run's structures means the
    model holds them far lower than the teacher does: a basin of its own.

    Parameters
    ----------
    system : CGSystem
    model, teacher : Potential
        Evaluated on the CPU (reference path).
    model_positions, teacher_positions : torch.Tensor, shape (R, n, 3), float32
        Final structures of the model run and of the teacher run.

    Returns
    -------
    dict
        ``energy_gap`` and ``energy_gap_std`` (kcal/mol, over the model run's structures),
        ``teacher_spread`` (std of the same difference over the teacher run's),
        ``force_rmse_model_run`` and ``force_rmse_teacher_run`` (kcal/mol/Å, model forces
        against the teacher's), ``terms_model_run`` / ``terms_teacher_run``: the mean
        energy of each of the model's terms (its network and every prior) at each set, and
        ``teacher_terms_model_run`` / ``teacher_terms_teacher_run``: the same for the
        teacher's terms (which of them a basin of the model's own strains: loose native
        contacts, twisted dihedrals, overlaps); ``flipped_dihedrals_model_run`` /
        ``flipped_dihedrals_teacher_run``: :func:`flipped_dihedral_fraction` of each set.
    """
    model, teacher = model.cpu(), teacher.cpu()
    sets = {"model_run": model_positions.cpu(), "teacher_run": teacher_positions.cpu()}
    difference, numbers = {}, {}
    for name, pos in sets.items():
        energy, forces = potential_labels(model, pos)
        teacher_energy, teacher_forces = potential_labels(teacher, pos)
        difference[name] = energy - teacher_energy
        numbers[f"force_rmse_{name}"] = float((forces - teacher_forces).square().mean().sqrt())
        graph = None
        if model.network is not None:
            graph = NeighborList(pos.shape[1], model.cutoff, skin=0.0).update(pos)
        with torch.no_grad():
            terms = model.energy_terms(pos, graph)
            teacher_terms = teacher.energy_terms(pos, None)
        numbers[f"terms_{name}"] = {key: float(value.mean()) for key, value in terms.items()}
        numbers[f"teacher_terms_{name}"] = {
            key: float(value.mean()) for key, value in teacher_terms.items()
        }
        numbers[f"flipped_dihedrals_{name}"] = flipped_dihedral_fraction(system, pos)
    offset = difference["teacher_run"].mean()
    gap = difference["model_run"] - offset
    return {
        "energy_gap": float(gap.mean()),
        "energy_gap_std": float(gap.std()) if gap.numel() > 1 else 0.0,
        "teacher_spread": float(difference["teacher_run"].std())
        if difference["teacher_run"].numel() > 1 else 0.0,
        **numbers,
    }


def compare_force_paths(
    system: CGSystem,
    potential: Potential,
    paths: dict[str, KernelOptions],
    temperature: float,
    replicas: int,
    steps: int,
    save_every: int,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> dict:
    """Run one potential through two force paths (e.g. tabulated filters and the exact
    path) with the same replicas and seed, and compare their Q distributions.

    Parameters
    ----------
    paths : dict of str to KernelOptions
        Exactly two labelled force paths.

    Returns
    -------
    dict
        ``paths`` (labels), ``q_intersection``, ``folded`` (label → folded fraction) and
        ``mean_q`` (label → mean Q) over every sample of every replica.
    """
    if len(paths) != 2:
        raise ValueError(f"compare two force paths, got {len(paths)}")
    q = {
        label: sample_q_rmsd(
            system, potential, [temperature], replicas, steps, save_every, device, seed,
            options=options,
        )[0][0]
        for label, options in paths.items()
    }
    first, second = q.values()
    return {
        "paths": list(paths),
        "q_intersection": histogram_intersection(first, second),
        "folded": {label: folded_fraction(values) for label, values in q.items()},
        "mean_q": {label: float(values.mean()) for label, values in q.items()},
    }


def validate_against_teacher(
    system: CGSystem,
    teacher: Potential,
    model: Potential,
    temperatures: Sequence[float],
    replicas: int,
    steps: int,
    save_every: int,
    device: str | torch.device = "cpu",
    seed: int = 0,
    plot_path: str | Path | None = None,
    series_path: str | Path | None = None,
) -> dict:
    """Run teacher and model alike and compare them at every temperature.

    ``series_path``, when given, receives the raw series (``torch.save`` of a dict:
    ``temperatures`` and ``{teacher,model}_{q,rmsd}``, float32 ``(temperatures, replicas,
    frames)``), from which the plots can be redrawn without rerunning MD.

    Returns
    -------
    dict
        ``temperatures`` (list of float), ``steps``, ``replicas`` and ``results`` (one
        :func:`compare_q` dict per temperature); ``plot`` holds the PNG path when one was
        written.
    """
    runs = {
        name: sample_q_rmsd(
            system, potential, temperatures, replicas, steps, save_every, device, seed
        )
        for name, potential in (("teacher", teacher), ("model", model))
    }
    states = state_thresholds(system.name)
    results = [
        compare_q(runs["teacher"][0][i], runs["model"][0][i], runs["model"][1][i], states)
        for i in range(len(temperatures))
    ]
    summary = {
        "temperatures": [float(t) for t in temperatures],
        "steps": steps,
        "replicas": replicas,
        "results": results,
    }
    if plot_path is not None and plot_validation(runs, temperatures, plot_path):
        summary["plot"] = str(plot_path)
    if series_path is not None:
        series = {f"{name}_{kind}": runs[name][k] for name in runs
                  for k, kind in enumerate(("q", "rmsd"))}
        atomic_save({"temperatures": summary["temperatures"], **series}, series_path)
    return summary


def _pyplot():
    """matplotlib's pyplot on the non-interactive Agg backend, or None where it is not
    installed (the plots are optional)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save_palette_png(fig, path: str | Path, dpi: int) -> None:
    """Write ``fig`` as a PNG of at most 256 colours (half the bytes of a full-colour one:
    these plots ship beside the models, in a repository with a size budget).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    path : str or Path
    dpi : int
    """
    import io

    from PIL import Image  # a requirement of matplotlib

    rendered = io.BytesIO()
    fig.savefig(rendered, format="png", dpi=dpi)
    rendered.seek(0)
    palette = Image.open(rendered).convert("RGB").quantize(
        colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    atomic_write(path, lambda out: palette.save(out, format="png", optimize=True))


def plot_validation(
    runs: dict[str, tuple[torch.Tensor, torch.Tensor]],
    temperatures: Sequence[float],
    path: str | Path,
) -> bool:
    """Q histograms (teacher vs model) and model RMSD–Q scatter per temperature, as PNG.

    Parameters
    ----------
    runs : dict
        ``"teacher"`` and ``"model"`` → (q, rmsd) of :func:`sample_q_rmsd`.
    temperatures : sequence of float
    path : str or Path

    Returns
    -------
    bool
        False (and nothing written) when matplotlib is not installed.
    """
    plt = _pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(2, len(temperatures), figsize=(4 * len(temperatures), 7),
                             squeeze=False)
    for i, temperature in enumerate(temperatures):
        for name in ("teacher", "model"):
            axes[0, i].hist(runs[name][0][i].flatten().numpy(), bins=50, range=(0, 1),
                            density=True, histtype="step", label=name)
        axes[0, i].set(title=f"{temperature:g} K", xlabel="Q", ylabel="density")
        axes[0, i].legend()
        axes[1, i].scatter(runs["model"][0][i].flatten().numpy(),
                           runs["model"][1][i].flatten().numpy(), s=2, alpha=0.3)
        axes[1, i].set(xlabel="Q (model)", ylabel="CA RMSD (Å)")
    fig.tight_layout()
    _save_palette_png(fig, path, dpi=120)
    plt.close(fig)
    return True


def plot_long_runs(
    models: dict[str, str | Path],
    teacher_metrics: str | Path,
    path: str | Path,
    states: tuple[float, float] = (FOLDED_Q, UNFOLDED_Q),
) -> bool:
    """Long runs against the teacher's, as PNG: Q histograms over the whole runs, and the
    folded and unfolded fractions of the replicas against time (Q thresholds ``states``,
    0.8 and 0.4 by default).

    Parameters
    ----------
    models : dict of str to path
        Label → ``metrics.csv`` of a run of a model.
    teacher_metrics : str or Path
        ``metrics.csv`` of the teacher's run.
    path : str or Path
        PNG to write.

    Returns
    -------
    bool
        Whether the PNG was written (not without matplotlib, an optional package).
    """
    plt = _pyplot()
    if plt is None:
        return False
    series = {"teacher": teacher_metrics, **models}
    fig, (hist, folded, unfolded) = plt.subplots(1, 3, figsize=(15, 4))
    for label, metrics in series.items():
        q, _, time_ps = series_from_metrics(metrics)
        times = torch.linspace(time_ps / q.shape[1], time_ps, q.shape[1]).numpy()
        line = hist.hist(q.flatten().numpy(), bins=50, range=(0, 1), density=True,
                         histtype="step", label=label)[2][0]
        folded.plot(times, (q > states[0]).float().mean(0).numpy(),
                    color=line.get_edgecolor(), label=label, lw=1)
        unfolded.plot(times, (q < states[1]).float().mean(0).numpy(),
                      color=line.get_edgecolor(), label=label, lw=1)
    hist.set(xlabel="Q", ylabel="density", title="Q over the whole run")
    folded.set(xlabel="time (ps)", ylabel="fraction of replicas", ylim=(0, 1),
               title=f"folded (Q > {states[0]:g})")
    unfolded.set(xlabel="time (ps)", ylabel="fraction of replicas", ylim=(0, 1),
                 title=f"unfolded (Q < {states[1]:g})")
    for axis in (hist, folded, unfolded):
        axis.legend(fontsize="small")
    fig.tight_layout()
    _save_palette_png(fig, path, dpi=110)
    plt.close(fig)
    return True


def energy_gaps(
    models: dict[str, Potential],
    teacher: Potential,
    reference: torch.Tensor,
    structures: dict[str, torch.Tensor],
) -> dict[str, dict[str, dict[str, float]]]:
    """Energy gap and force RMSE of every model at every set of structures.

    Parameters
    ----------
    models : dict of str to Potential
        Named models.
    teacher : Potential
        The teacher they are compared with.
    reference : torch.Tensor, shape (M, n, 3)
        Structures at which the gap is zero on average.
    structures : dict of str to torch.Tensor, each shape (m, n, 3)
        Named sets of structures.

    Returns
    -------
    dict
        ``{model: {set: {"energy_gap": kcal/mol, "force_rmse": kcal/mol/Å}}}``.
    """
    teacher_labels = {name: potential_labels(teacher, pos) for name, pos in structures.items()}
    reference_energy = potential_labels(teacher, reference)[0]
    table = {}
    for name, model in models.items():
        offset = (potential_labels(model, reference)[0] - reference_energy).mean()
        table[name] = {}
        for set_name, positions in structures.items():
            energy, forces = potential_labels(model, positions)
            teacher_energy, teacher_forces = teacher_labels[set_name]
            table[name][set_name] = {
                "energy_gap": float((energy - teacher_energy - offset).mean()),
                "force_rmse": float((forces - teacher_forces).square().mean().sqrt()),
            }
    return table
