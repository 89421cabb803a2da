"""The run's throughput meter: warm-up excluded from the rate, and reported apart."""

from __future__ import annotations

import pytest
import torch

from workbench.runner import ThroughputMeter


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
