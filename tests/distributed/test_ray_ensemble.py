"""The Ray ensemble on a local CPU cluster: equal to the shards run directly, an actor
killed mid-chunk (its process exits) restarts from its checkpoint and the run ends bit for
bit as an uninterrupted one, an actor out of restarts stops the run with an error that
``resume`` recovers from, and settings that would mix runs are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import concatenated, run_shards_directly

ray = pytest.importorskip("ray")

from workbench.distributed.ray_ensemble import (  # noqa: E402
    CrashPlan,
    EnsembleError,
    EnsembleSettings,
    load_ensemble_state,
    run_ensemble,
)

STEPS, REPORT, CHECKPOINT = 24, 4, 8


@pytest.fixture(scope="module", autouse=True)
def local_cluster():
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=100 * 2**20,
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def run(settings):
    return settings(replicas=5, steps=STEPS, save_interval=REPORT)


def ensemble(run, folder, **changes) -> EnsembleSettings:
    return EnsembleSettings(
        run,
        actors=2,
        checkpoint_dir=str(folder),
        checkpoint_interval=CHECKPOINT,
        chunk_timeout_s=120,
        **changes,
    )


@pytest.fixture(scope="module")
def uninterrupted(run, tmp_path_factory):
    streamed = []
    result = run_ensemble(ensemble(run, tmp_path_factory.mktemp("a")), streamed.append)
    return result, streamed


def assert_same_run(a, b):
    first, second = load_ensemble_state(a.checkpoints), load_ensemble_state(b.checkpoints)
    assert first["step"] == second["step"] == STEPS
    assert torch.equal(first["positions"], second["positions"])
    assert torch.equal(first["velocities"], second["velocities"])


def test_the_ensemble_equals_its_shards_run_directly(run, uninterrupted):
    result, streamed = uninterrupted
    assert streamed == result.reports and result.restarts == {}
    assert [r.step for r in result.reports] == list(range(REPORT, STEPS + 1, REPORT))

    expected = []
    sims = run_shards_directly(run, 2, lambda s: expected.append(concatenated(s, "energy")))
    state = load_ensemble_state(result.checkpoints)
    assert torch.equal(state["positions"], concatenated(sims, "positions"))
    assert torch.equal(state["velocities"], concatenated(sims, "velocities"))
    for report, energy in zip(result.reports, expected, strict=True):
        assert np.array_equal(report.replicas, np.arange(5))
        assert np.array_equal(report.metrics["potential_energy"], energy.numpy())
        assert report.timestep_mol_per_s > 0


def test_a_killed_actor_resumes_from_its_checkpoint_bit_for_bit(run, uninterrupted, tmp_path):
    # shard 1 dies at step 12, inside the chunk 8 -> 16: 4 steps since its checkpoint are lost
    crashed = run_ensemble(ensemble(run, tmp_path, crash=CrashPlan(shard=1, step=12)))
    assert (tmp_path / "shard_001.crashed").is_file()
    assert crashed.restarts == {1: [8]}
    assert_same_run(crashed, uninterrupted[0])
    for a, b in zip(crashed.reports, uninterrupted[0].reports, strict=True):
        assert a.step == b.step
        for key, values in a.metrics.items():
            assert np.array_equal(values, b.metrics[key], equal_nan=True), key


def test_an_actor_out_of_restarts_stops_the_run_and_resume_finishes_it(
    run, uninterrupted, tmp_path
):
    with pytest.raises(EnsembleError, match="resume=True"):
        run_ensemble(ensemble(run, tmp_path, crash=CrashPlan(shard=0, step=12), max_restarts=0))
    assert load_ensemble_state([tmp_path / "shard_000.pt"])["step"] == CHECKPOINT
    resumed = run_ensemble(ensemble(run, tmp_path, resume=True))
    assert_same_run(resumed, uninterrupted[0])


def test_settings_that_would_mix_runs_are_refused(run, settings, uninterrupted, tmp_path):
    finished = uninterrupted[0].checkpoints[0].parent
    with pytest.raises(ValueError, match="already holds checkpoints"):
        run_ensemble(ensemble(run, finished))
    with pytest.raises(ValueError, match="holds 0 of 2 checkpoints"):
        run_ensemble(ensemble(run, tmp_path, resume=True))
    with pytest.raises(ValueError, match="multiple of the report interval"):
        run_ensemble(EnsembleSettings(run, 2, str(tmp_path), checkpoint_interval=6))
    with pytest.raises(ValueError, match="not run across Ray actors"):
        laddered = settings(replicas=4, ladder=(300.0, 350.0, 2))
        run_ensemble(EnsembleSettings(laddered, 2, str(tmp_path), checkpoint_interval=8))
