"""Process settings of a CPU run."""

import sys

import torch

from workbench.md.cpu_setup import configure_cpu_process, cpu_threads, keep_freed_memory


def test_cpu_threads_respects_the_allowed_cores():
    assert 1 <= cpu_threads() <= torch.get_num_threads()


def test_freed_memory_is_kept_on_glibc():
    kept = keep_freed_memory()
    assert kept or not sys.platform.startswith("linux")


def test_configure_keeps_the_thread_count_within_the_cores():
    threads = torch.get_num_threads()
    try:
        configure_cpu_process()
        assert torch.get_num_threads() == cpu_threads() <= threads
    finally:
        torch.set_num_threads(threads)
