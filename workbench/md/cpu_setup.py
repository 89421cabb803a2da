"""Process settings for MD on a CPU: intra-op threads and the C allocator's thresholds.

A CPU step allocates and frees many temporaries of about a megabyte (the PyTorch tables
path works in chunks sized to a core's L2 cache). With glibc's default, dynamic thresholds
the freed top of the heap is returned to the system and taken back at the next step, so
each step pays page faults and the kernel's zeroing of the pages: CLN025 x 8 on one core
measured 270 to 2,800 minor faults per step and 415-570 timestep·mol/s, against none and
577-596 with the thresholds fixed (`keep_freed_memory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import torch

#: ``mallopt`` parameters (glibc's malloc.h) and the values a CPU run sets: freed memory
#: stays in the process up to 256 MiB, and blocks below 64 MiB come from the heap.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
TRIM_THRESHOLD, MMAP_THRESHOLD = 256 << 20, 64 << 20


def cpu_threads() -> int:
    """Intra-op threads for a CPU run: PyTorch's default (one per physical core), but no
    more than the cores this process may run on (``os.sched_getaffinity``, e.g. under
    ``taskset`` or a container's CPU set)."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return min(torch.get_num_threads(), allowed or torch.get_num_threads())


def keep_freed_memory() -> bool:
    """Fix glibc's trim and mmap thresholds (`TRIM_THRESHOLD`, `MMAP_THRESHOLD`) for this
    process, so that freed temporaries are reused without page faults. Returns whether
    it could (False where the C library has no ``mallopt``: macOS, Windows, musl)."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def configure_cpu_process() -> None:
    """`cpu_threads` intra-op threads and `keep_freed_memory`: what a CPU run sets once."""
    torch.set_num_threads(cpu_threads())
    keep_freed_memory()
