"""Kernel switches of a run: what was asked for, what could run, and when.

Each network architecture implements its own techniques
(`workbench.model.force_paths.implemented_techniques`: CGSchNet all, CGEGNN and CGPaiNN
their fused message kernel (CGPaiNN's also reading its filter tables), CGTensorProduct its
radial MLPs' kernel (``fused_update``), with captured steps, and the step's techniques); the
others are switched off with a message. The fused kernels need a CUDA GPU. When a
requested set of switches cannot run, the run keeps the PyTorch reference path (a
CGSchNet's tabulated filters, which also run in PyTorch, stay on) and the user gets one
clear message, whether the reason is known in advance (no GPU, a technique the network
lacks), or the engine raises or warns.
A network with run-time backends (`workbench.runner.NETWORK_BACKENDS`: a tensor-product
network's convolution backend, who evaluates a Deep Potential) switches its backend the
same way, refused with the reason where it cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from workbench.model.ablation import TURNS_ON, WALK, walk_stages
from workbench.model.force_paths import (
    PYTORCH_ONLY,
    PYTORCH_TECHNIQUES,
    STEP_TECHNIQUES,
    bring_needed,
    brought_notice,
    drop_unimplemented,
    implemented_techniques,
    network_name,
    triton_runs_on,
)
from workbench.model.options import KernelOptions
from workbench.runner import NETWORK_BACKENDS, NetworkBackends, backends_of


def options_label(options: KernelOptions) -> str:
    """Short name of a set of switches: ``"baseline"`` or the enabled techniques joined by +."""
    enabled = options.enabled()
    return "+".join(enabled) if enabled else "baseline"


#: The order of the walk through the techniques: the ablation's order
#: (`workbench.model.ablation`): the four techniques of the flash engine (distance + basis
#: on chip, fused message passing, CSR reductions, fused node updates), the engine's
#: per-step pair search and fused Langevin steps (together: ``all``), then 16-bit MLPs,
#: captured steps and, beyond the paper, the tabulated filters. ``mlp_fp16`` stands for
#: ``mlp_precision="fp16"``.
WALKTHROUGH = WALK


def walkthrough() -> list[KernelOptions]:
    """The switches of each stage of :data:`WALKTHROUGH`, cumulative, from the baseline.

    Returns
    -------
    list of KernelOptions
        ``len(WALKTHROUGH) + 1`` entries; the first is the baseline.
    """
    return [options for _, options in walk_stages()]


def walk_note(stage: int) -> str:
    """What stage ``stage`` of :func:`walkthrough` turns on, in a line (``""`` for the
    baseline, stage 0)."""
    return TURNS_ON[WALKTHROUGH[stage - 1]] if stage > 0 else ""


def change_label(before: KernelOptions | None, after: KernelOptions) -> str:
    """What a switch changed: ``"+csr_aggregation"``, ``"−cuda_graph"``, ``"fp32→fp16"``
    (several joined by spaces), ``"baseline"`` when it turned everything off, or the
    applied switches' name when there is no ``before``."""
    if before is None:
        return options_label(after)
    if after.is_baseline and not before.is_baseline:
        return "baseline"
    parts = [
        f"{'+' if getattr(after, name) else '−'}{name}"
        for name in KernelOptions.techniques()
        if getattr(after, name) != getattr(before, name)
    ]
    if after.mlp_precision != before.mlp_precision:
        parts.append(f"{before.mlp_precision}→{after.mlp_precision}")
    return " ".join(parts) or "no change"


def absent_techniques_note(architecture: str | None) -> str:
    """Why the kernel switches of a network of ``architecture`` leave techniques out (``""``
    when none is left out)."""
    shown = implemented_techniques(architecture)
    absent = [name for name in KernelOptions.techniques() if name not in shown]
    if not absent:
        return ""
    network = "a prior-only potential" if architecture is None else network_name(architecture)
    own = [name for name in shown if name not in STEP_TECHNIQUES and name != "cuda_graph"]
    kernels = (f"its fused kernels are {', '.join(own)}" if own else "it has no fused kernels")
    graphs = "" if "cuda_graph" in shown else (
        "; its steps are not captured as CUDA graphs (workbench.md.captured_steps)")
    return (f"{network}: {kernels}; the pair search and the Langevin steps run for any "
            f"network{graphs}. Not offered: {', '.join(absent)}.")


def usable_options(
    options: KernelOptions, device: torch.device, architecture: str | None = "schnet"
) -> tuple[KernelOptions, str | None]:
    """The switches that can run on ``device`` for a network of ``architecture`` and a
    message when they differ from the request.

    Parameters
    ----------
    options : KernelOptions
        Requested switches.
    device : torch.device
        Device of the simulation.
    architecture : str or None
        The potential's network (`workbench.model.force_paths.implemented_techniques`;
        None: a prior-only potential).

    Returns
    -------
    (KernelOptions, str or None)
        ``options`` itself, or what of them runs with the reason: the techniques the
        network has no kernels for are off; ``cuda_graph`` brings what it needs on a GPU
        (`workbench.model.force_paths.bring_needed`); off a GPU, the reference path, but the
        techniques with a PyTorch implementation stay on (``tabulated_filter`` of a
        CGSchNet, `workbench.model.pytorch_tables`, or of a CGDeepPotential,
        `workbench.model.dp_tables`).
    """
    implemented = replace(options)
    absent = drop_unimplemented(implemented, architecture)
    notes = [] if not absent else [
        f"{network_name(architecture)} has no fused kernels for {', '.join(absent)}: they "
        "are off."]
    brought = bring_needed(implemented, device, architecture)
    if brought:
        notes.append(brought_notice(brought, architecture, implemented))
    note = " ".join(notes) or None
    if implemented.is_baseline or device.type == "cuda":
        return (options, None) if note is None else (implemented, note)
    # the techniques with a PyTorch path stay on, except under TRITON_INTERPRET (tests),
    # where they would run in the Triton interpreter (those that run in PyTorch only stay)
    keep = (PYTORCH_ONLY if triton_runs_on(device) else PYTORCH_TECHNIQUES).get(architecture,
                                                                             ())
    kept = KernelOptions(**{name: getattr(implemented, name) for name in keep})
    if kept == options:
        return options, None
    rest = ("it keeps the PyTorch reference path" if kept.is_baseline else
            f"only {options_label(kept)} runs, in PyTorch; the rest keeps the reference path")
    device_note = (f"Fused kernels ({options_label(implemented)}) need a CUDA GPU; this run "
                   f"is on {device.type}, so {rest}.")
    return kept, device_note if note is None else f"{note} {device_note}"


def failure_message(options: KernelOptions, exc: BaseException) -> str:
    """Message for switches the engine refused by raising ``exc``."""
    return (
        f"Fused kernels ({options_label(options)}) failed ({type(exc).__name__}: {exc}); "
        "switched back to the PyTorch reference path."
    )


def warning_message(options: KernelOptions, messages: list[str]) -> str:
    """Message for switches the engine accepted with warnings (it may have fallen back)."""
    return f"Kernel switch to {options_label(options)}: engine warned: " + " | ".join(messages)


def network_backends(potential) -> NetworkBackends | None:
    """The run-time backends of ``potential``'s network (`workbench.runner.NETWORK_BACKENDS`),
    None for a network without."""
    return NETWORK_BACKENDS.get(getattr(potential, "architecture", None))


def network_backend(potential) -> str | None:
    """The backend of a network with run-time backends (``network.backend``: a
    tensor-product network's convolution backend, who evaluates a Deep Potential), None for
    any other network."""
    return None if network_backends(potential) is None else potential.network.backend


def usable_backend(
    requested: str, device: torch.device, potential, current: str | None
) -> tuple[str | None, str | None]:
    """The backend a run's network switches to and, when it is not ``requested``, why.

    Parameters
    ----------
    requested : str
        A backend of `workbench.runner.NETWORK_BACKENDS`.
    device : torch.device
        Device of the simulation.
    potential : Potential
        The run's potential: only a network of the backend's architecture takes it.
    current : str or None
        The backend in use (kept when ``requested`` cannot run).

    Returns
    -------
    (str or None, str or None)
        ``(requested, None)``, or ``(current, reason)`` where the backend is refused
        (`NetworkBackends.problem`) or the network is of another architecture.

    Raises
    ------
    ValueError
        A backend of no network.
    """
    backends = backends_of(requested)
    if network_backends(potential) is not backends:
        architecture = getattr(potential, "architecture", None)
        network = "a prior-only potential" if architecture is None else network_name(architecture)
        return current, (f"{backends.subject} {requested!r} refused: it is a backend of the "
                         f"{backends.architecture} network only; this run's is {network}.")
    problem = backends.problem(potential.network, requested, device)
    if problem is None:
        return requested, None
    return current, (f"{backends.subject} {requested!r} refused ({problem}); the run "
                     f"keeps {current}.")


def backend_options(
    backends: NetworkBackends, backend: str, options: KernelOptions
) -> tuple[KernelOptions, str | None]:
    """The kernel switches ``options`` as a network with ``backends`` runs them on
    ``backend``, and what the user should know about them.

    Parameters
    ----------
    backends : NetworkBackends
    backend : str
        The backend the network runs now.
    options : KernelOptions
        The switches asked for (not changed).

    Returns
    -------
    (KernelOptions, str or None)
        ``options`` itself, or a copy without what another package's model does not run
        (`NetworkBackends.settle_options`), with the notice.
    """
    fitted = replace(options)
    notice = backends.settle_options(backend, fitted)
    return (options if fitted == options else fitted), notice


def backend_change_label(before: str | None, requested: str, applied: str | None) -> str:
    """``"backend e3nn→openequivariance"``, ``"backend engine→deepmd"``, with
    ``" (not run)"`` where it was refused, or ``"backend openequivariance→e3nn (failed)"``
    where the backend in use failed."""
    if before == requested and applied != requested:
        return f"backend {requested}→{applied} (failed)"
    label = f"backend {before}→{requested}"
    return label if applied == requested else f"{label} (not run)"


@dataclass(frozen=True)
class KernelEvent:
    """One change of the kernel switches during a run.

    Attributes
    ----------
    step : int
        Simulation step at which the new switches took effect.
    wall_s : float
        Seconds since the run started.
    requested : KernelOptions
        What the user asked for.
    applied : KernelOptions
        What the simulation used from then on.
    message : str or None
        Why ``applied`` differs from ``requested`` (or what the engine warned).
    backend : str or None
        The network's backend from then on (`network_backend`; None for a network
        without run-time backends).
    requested_backend : str or None
        The backend asked for, on a change of backend only (None otherwise); ``backend``
        differs from it where it was refused.
    """

    step: int
    wall_s: float
    requested: KernelOptions
    applied: KernelOptions
    message: str | None = None
    backend: str | None = None
    requested_backend: str | None = None

    @property
    def label(self) -> str:
        """Name of the applied switches, for plot markers."""
        return options_label(self.applied)
