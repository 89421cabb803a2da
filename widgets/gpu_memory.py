"""Device memory of a run, as the throughput plots show it."""

from __future__ import annotations

import torch


def gpu_memory_gb(device: torch.device) -> tuple[float | None, float | None]:
    """Currently allocated and peak allocated memory on a CUDA device, GB.

    Parameters
    ----------
    device : torch.device

    Returns
    -------
    (float or None, float or None)
        ``torch.cuda.memory_allocated`` and ``torch.cuda.max_memory_allocated`` in GB;
        ``(None, None)`` on any other device.
    """
    if device.type != "cuda":
        return None, None
    return (
        torch.cuda.memory_allocated(device) / 1e9,
        torch.cuda.max_memory_allocated(device) / 1e9,
    )
