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

#: Beads of all replicas together below which a run on the PyTorch tables path keeps one
#: intra-op thread: each operation of its step then takes tens of µs, as long as starting
#: and joining the threads, and a second core that anything else uses stalls every one of
#: them. CLN025 × 8 (392 beads) on two cores: one thread 535-594 timestep·mol/s; two
#: threads 388-776, as the other core was busy or free. The reference path, whose
#: operations are larger, gains from both cores (96 against 186)
#: (`docs/decisions/0014-one-thread-for-small-table-runs.md`).
ONE_THREAD_BELOW = 2048

#: PyTorch's intra-op threads when this module was imported (before any run set them).
DEFAULT_THREADS = torch.get_num_threads()

#: ``mallopt`` parameters (glibc's malloc.h) and the values a CPU run sets: freed memory
#: stays in the process up to 256 MiB, and blocks below 64 MiB come from the heap.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
TRIM_THRESHOLD, MMAP_THRESHOLD = 256 << 20, 64 << 20


def cpu_threads(beads: int | None = None) -> int:
    """Intra-op threads for a CPU run: PyTorch's default (one per physical core, or
    ``OMP_NUM_THREADS``), but no more than the cores this process may run on
    (``os.sched_getaffinity``, e.g. under ``taskset`` or a container's CPU set), and one
    for a tables run of fewer than `ONE_THREAD_BELOW` ``beads`` (None: not such a run)
    unless ``OMP_NUM_THREADS`` says otherwise."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    threads = min(DEFAULT_THREADS, allowed or DEFAULT_THREADS)
    small = beads is not None and beads < ONE_THREAD_BELOW
    return 1 if small and "OMP_NUM_THREADS" not in os.environ else threads


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


def configure_cpu_process(beads: int | None = None) -> None:
    """`cpu_threads` intra-op threads and `keep_freed_memory`: what a CPU run sets once.
    ``beads``: all replicas' beads of a run on the PyTorch tables path (None otherwise)."""
    torch.set_num_threads(cpu_threads(beads))
    keep_freed_memory()
