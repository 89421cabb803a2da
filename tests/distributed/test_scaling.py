"""The N-GPU-against-1 benchmark, on the CPU with gloo processes: both configurations
measured, speed-up and efficiency derived, a failing configuration recorded, JSON written."""

from __future__ import annotations

import json

from workbench.distributed.scaling import measure, scaling, write_scaling


def test_scaling_measures_one_and_n_ranks_and_writes_json(settings, tmp_path):
    run = settings(steps=6, save_interval=2)
    result = scaling(run, gpus=2, replicas_per_gpu=2, timeout_s=120)
    one, two = result["records"]
    assert (one["ranks"], one["replicas"], two["ranks"], two["replicas"]) == (1, 2, 2, 4)
    for record in (one, two):
        assert record["backend"] == "gloo" and record["timestep_mol_per_s"] > 0
        assert len(record["rank_timestep_mol_per_s"]) == record["ranks"]
    assert result["speedup"] == two["timestep_mol_per_s"] / one["timestep_mol_per_s"]
    assert result["efficiency"] == result["speedup"] / 2

    path = write_scaling(result, run, tmp_path / "out" / "results.json", "the command")
    saved = json.loads(path.read_text())
    assert saved["command"] == "the command" and saved["records"] == json.loads(
        json.dumps(result["records"])
    )
    assert saved["settings"]["report_interval"] == 2 and "torch" in saved["environment"]


def test_a_failing_configuration_is_recorded_not_raised(settings):
    record = measure(settings(replicas=2), 3, timeout_s=120)
    assert record == {
        "ranks": 3,
        "replicas": 2,
        "error": "2 replicas cannot be spread over 3 ranks: each needs at least one",
    }
