"""Kernel switches of a run: what was asked for, what could run, and when.

The fused kernels need a CUDA GPU. When a requested set of switches cannot run,
the run keeps the PyTorch reference path (the tabulated filters, which also run in
PyTorch, stay on) and the user gets one clear message, whether the reason is known in
advance (no GPU), or the engine raises or warns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.model.ablation import TURNS_ON, WALK, walk_stages
from workbench.model.force_paths import PYTORCH_TECHNIQUES, triton_runs_on
from workbench.model.options import KernelOptions


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


def usable_options(
    options: KernelOptions, device: torch.device
) -> tuple[KernelOptions, str | None]:
    """The switches that can run on ``device`` and a message when they differ from the request.

    Parameters
    ----------
    options : KernelOptions
        Requested switches.
    device : torch.device
        Device of the simulation.

    Returns
    -------
    (KernelOptions, str or None)
        ``options`` itself, or the reference path with the reason. Off a GPU the
        techniques with a PyTorch implementation stay on (``tabulated_filter``:
        `workbench.model.pytorch_tables`).
    """
    if options.is_baseline or device.type == "cuda":
        return options, None
    # the techniques with a PyTorch path stay on, except under TRITON_INTERPRET (tests),
    # where they would run in the Triton interpreter
    keep = () if triton_runs_on(device) else PYTORCH_TECHNIQUES
    kept = KernelOptions(**{name: getattr(options, name) for name in keep})
    if kept == options:
        return options, None
    rest = ("it keeps the PyTorch reference path" if kept.is_baseline else
            f"only {options_label(kept)} runs, in PyTorch; the rest keeps the reference path")
    return kept, (
        f"Fused kernels ({options_label(options)}) need a CUDA GPU; this run is on "
        f"{device.type}, so {rest}."
    )


def failure_message(options: KernelOptions, exc: BaseException) -> str:
    """Message for switches the engine refused by raising ``exc``."""
    return (
        f"Fused kernels ({options_label(options)}) failed ({type(exc).__name__}: {exc}); "
        "switched back to the PyTorch reference path."
    )


def warning_message(options: KernelOptions, messages: list[str]) -> str:
    """Message for switches the engine accepted with warnings (it may have fallen back)."""
    return f"Kernel switch to {options_label(options)}: engine warned: " + " | ".join(messages)


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
    """

    step: int
    wall_s: float
    requested: KernelOptions
    applied: KernelOptions
    message: str | None = None

    @property
    def label(self) -> str:
        """Name of the applied switches, for plot markers."""
        return options_label(self.applied)
