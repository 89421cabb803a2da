"""Which force path a run's `KernelOptions` get on its device, told to the user.

Where the Triton kernels can run (`fused_path_problem` finds nothing), every technique runs
as asked. Elsewhere (a CPU, or a model the kernels do not implement) ``tabulated_filter``
still runs, in PyTorch (`workbench.model.pytorch_tables`), and every other technique falls
back to the PyTorch reference path. `settle_options` switches those off in the options
themselves, so that what a run reports (its banner, summary and benchmark record) is what
ran, and says so in a notice.
"""

from __future__ import annotations

from dataclasses import fields

import torch

from workbench.model.options import KernelOptions

#: Techniques with a PyTorch implementation besides the Triton one.
PYTORCH_TECHNIQUES = frozenset({"tabulated_filter"})


def triton_runs_on(device: torch.device) -> bool:
    """Whether Triton kernels run on ``device``'s tensors: a CUDA GPU with Triton, or any
    device under ``TRITON_INTERPRET=1`` (the tests' CPU stand-in for a GPU)."""
    from kernels import triton_available
    from kernels._triton import INTERPRET

    return triton_available() and (device.type == "cuda" or INTERPRET)


def fused_problem(schnet, device: torch.device, options: KernelOptions) -> str | None:
    """Why the Triton kernels cannot run ``options`` here (None if they can): the network's
    reasons (`fused_path_problem`), or for a prior-only potential whether Triton runs on
    ``device`` at all."""
    from workbench.model.fused_schnet import fused_path_problem

    if schnet is not None:
        return fused_path_problem(schnet, device, options)
    return None if triton_runs_on(device) else "no Triton on this device"


def force_path(schnet, device: torch.device, options: KernelOptions) -> str:
    """What evaluates the forces: ``"triton"`` (fused kernels), ``"pytorch-tables"`` (the
    tabulated filters in PyTorch) or ``"reference"``."""
    if options.is_baseline:
        return "reference"
    if fused_problem(schnet, device, options) is None:
        return "triton"
    return "pytorch-tables" if schnet is not None and options.tabulated_filter else "reference"


def settle_options(options: KernelOptions, device: torch.device, schnet) -> list[str]:
    """Switch off (in place) the techniques that cannot run here; notices for the user.

    Parameters
    ----------
    options : KernelOptions
        Asked for; afterwards what runs.
    device : torch.device
    schnet : CGSchNet or None
        The potential's network (None for a prior-only potential).

    Returns
    -------
    list of str
        A notice naming what fell back, and one naming the PyTorch tables path when it
        runs.
    """
    notices = []
    problem = None if options.is_baseline else fused_problem(schnet, device, options)
    if problem is not None:
        keep = PYTORCH_TECHNIQUES if schnet is not None else frozenset()
        dropped = [f.name for f in fields(options)
                   if f.type == "bool" and getattr(options, f.name) and f.name not in keep]
        for name in dropped:
            setattr(options, name, False)
        if options.mlp_precision != "fp32":
            dropped.append(f"mlp_precision={options.mlp_precision}")
            options.mlp_precision = "fp32"
        if dropped:
            notices.append(f"Fused kernels unavailable ({problem}): {', '.join(dropped)} "
                           "fell back to the PyTorch reference path.")
    if force_path(schnet, device, options) == "pytorch-tables":
        count = torch.get_num_threads()
        threads = f", {count} thread{'s' * (count != 1)}" if device.type == "cpu" else ""
        notices.append("Tabulated filters in PyTorch (workbench.model.pytorch_tables: each "
                       f"block's filter from its cubic Hermite table{threads}).")
    return notices
