"""The run's throughput meter (warm-up excluded from the rate, and reported apart) and the
process settings of a CPU run."""

from __future__ import annotations

import sys

import pytest
import torch

from workbench.runner import (
    DEFAULT_THREADS,
    ONE_THREAD_BELOW,
    ThroughputMeter,
    configure_cpu_process,
    cpu_threads,
    keep_freed_memory,
)


def test_meter_reports_the_first_chunk_apart_from_the_steady_rate():
    meter = ThroughputMeter(replicas=4, timestep_fs=4.0, device=torch.device("cpu"))
    meter.record(100, 5.0)  # compilation and capture in the first chunk
    assert meter.warmup_overhead_s() is None  # nothing to compare it with yet
    assert meter.timestep_mol_per_s() == pytest.approx(400 / 5.0)
    meter.record(100, 1.0)
    meter.record(300, 3.0)
    assert meter.timestep_mol_per_s() == pytest.approx(4 * 400 / 4.0)
    assert meter.timestep_mol_per_s(skip_warmup=False) == pytest.approx(4 * 500 / 9.0)
    assert meter.warmup_overhead_s() == pytest.approx(4.0)
    meter.chunks[0] = (100, 0.5)  # a first chunk faster than the rest: no overhead
    assert meter.warmup_overhead_s() == 0.0


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
