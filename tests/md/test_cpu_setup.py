"""Process settings of a CPU run."""

import sys

import torch

from workbench.md.cpu_setup import (
    DEFAULT_THREADS,
    ONE_THREAD_BELOW,
    configure_cpu_process,
    cpu_threads,
    keep_freed_memory,
)


def test_cpu_threads_respects_the_allowed_cores():
    assert 1 <= cpu_threads() <= DEFAULT_THREADS


def test_a_small_run_keeps_one_thread_unless_the_user_sets_them(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert cpu_threads(beads=ONE_THREAD_BELOW - 1) == 1
    assert cpu_threads(beads=ONE_THREAD_BELOW) == cpu_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", str(DEFAULT_THREADS))
    assert cpu_threads(beads=8) == cpu_threads()


def test_freed_memory_is_kept_on_glibc():
    kept = keep_freed_memory()
    assert kept or not sys.platform.startswith("linux")


def test_configure_sets_the_threads_of_the_run(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()
    try:
        configure_cpu_process(beads=392)
        assert torch.get_num_threads() == 1
        configure_cpu_process()
        assert torch.get_num_threads() == cpu_threads() <= DEFAULT_THREADS
    finally:
        torch.set_num_threads(threads)
