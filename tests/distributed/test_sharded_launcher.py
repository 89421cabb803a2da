"""Replicas sharded over processes (torch.distributed, gloo on the CPU): shard layout and
seeds, a 2-rank run equal bit for bit to its shards run directly, metrics gathered in
global replica order, rank failures and time-outs reported, bad settings refused, the
``workbench run --gpus`` command, and NCCL on two GPUs."""

from __future__ import annotations

import csv
import json
import time

import numpy as np
import pytest
import torch
from helpers import concatenated, run_shards_directly

from workbench.cli import main
from workbench.distributed import (
    ShardedRunError,
    ShardedSettings,
    launch_sharded,
    shard_seed,
    split_replicas,
)
from workbench.distributed.launcher import ShardedResult, _drain
from workbench.distributed.shards import shard_settings


# -- shards -------------------------------------------------------------------------------
def test_replicas_split_into_contiguous_near_equal_shards():
    shards = split_replicas(7, 3)
    assert [(s.first, s.replicas) for s in shards] == [(0, 3), (3, 2), (5, 2)]
    assert [s.index for s in shards] == [0, 1, 2] and {s.count for s in shards} == {3}
    assert shards[-1].stop == 7
    with pytest.raises(ValueError, match="at least one replica"):
        split_replicas(2, 3)
    with pytest.raises(ValueError, match="at least one shard"):
        split_replicas(2, 0)


def test_shard_settings_carry_their_own_seed_size_and_first_replica(settings):
    whole = settings(replicas=9, seed=11, ladder=(300.0, 400.0, 3))
    shard = split_replicas(9, 3)[2]
    mine = shard_settings(whole, shard, "cpu")
    assert (mine.replicas, mine.first_replica, mine.seed) == (3, 6, shard_seed(11, 2))
    assert mine.ladder is None  # exchanges run across the shards, not inside one
    assert whole.replicas == 9 and mine.neighbors is not whole.neighbors
    seeds = {shard_seed(s, k) for s in range(4) for k in range(4)}
    assert len(seeds) == 16 and all(0 <= s < 2**63 for s in seeds)


# -- the sharded run ----------------------------------------------------------------------
def test_two_gloo_ranks_equal_the_shards_run_directly(settings):
    run = settings(replicas=5, steps=8, save_interval=4)  # shards of 3 and 2 replicas
    streamed = []
    result = launch_sharded(
        ShardedSettings(run, ranks=2, timeout_s=120, threads_per_rank=1), on_report=streamed.append
    )
    assert result.backend == "gloo" and [s.replicas for s in result.shards] == [3, 2]

    expected = []

    def remember(sims):
        expected.append({k: torch.cat([s.metrics()[k] for s in sims]) for k in ("rmsd", "q")})
        expected[-1]["potential_energy"] = concatenated(sims, "energy")

    sims = run_shards_directly(run, 2, remember)
    assert torch.equal(result.positions, concatenated(sims, "positions"))
    assert torch.equal(result.velocities, concatenated(sims, "velocities"))

    assert streamed == result.reports and [r.step for r in result.reports] == [4, 8]
    for report, reference in zip(result.reports, expected, strict=True):
        assert np.array_equal(report.replicas, np.arange(5))
        for key, values in reference.items():
            assert np.array_equal(report.metrics[key], values.numpy()), key
        assert not report.metrics["frozen"].any()
        assert np.array_equal(report.metrics["temperature_set"], np.full(5, 300.0))
        assert report.timestep_mol_per_s > 0
    assert len(result.rank_timestep_mol_per_s) == 2 and result.timestep_mol_per_s > 0


def test_a_stop_request_ends_every_rank_at_the_same_report(settings):
    run = settings(replicas=4, steps=10_000, save_interval=2, ladder=(300.0, 360.0, 2),
                   exchange_every=2)  # an exchange before any report, however soon it stops
    reports = []
    result = launch_sharded(
        ShardedSettings(run, ranks=2, timeout_s=120, threads_per_rank=1, report_positions=True),
        on_report=reports.append,
        should_stop=lambda: len(reports) >= 2,
    )
    assert result.stopped and result.steps == reports[-1].step and result.steps < 10_000
    assert [r.step for r in reports] == list(range(2, result.steps + 1, 2))
    # positions travel with each report; the last report's are the final state
    assert reports[-1].positions.shape == (4, 49, 3)
    assert np.array_equal(reports[-1].positions, result.positions.numpy())
    assert reports[-1].tempering["exchange_rounds"] == result.tempering["exchange_rounds"] > 0


def test_the_driver_sees_a_stop_while_reports_never_stop_arriving():
    class EndlessReports:  # a queue that is never empty, as when ranks report every step
        def get(self, timeout):
            return "report", "r"

    received, polls = [], []
    result = ShardedResult(split_replicas(2, 1), "gloo")
    start = time.monotonic()
    _drain(EndlessReports(), result, received.append, lambda: polls.append(len(received)), 0.2)
    assert time.monotonic() - start < 2.0 and len(received) > 0
    assert polls[0] == 0 and polls[1:] == list(range(1, len(polls)))  # before and after each


def test_a_failing_rank_is_reported_with_its_error(settings, tmp_path):
    run = settings(replicas=2, model=str(tmp_path / "missing.pt"))
    with pytest.raises(ShardedRunError, match=r"(?s)rank \d of 2 failed.*missing\.pt"):
        launch_sharded(ShardedSettings(run, ranks=2, timeout_s=120, threads_per_rank=1))


def test_a_run_past_its_time_limit_is_stopped(settings):
    run = settings(replicas=2, steps=10_000)
    with pytest.raises(ShardedRunError, match="did not finish within 1 s"):
        launch_sharded(ShardedSettings(run, ranks=2, timeout_s=1, threads_per_rank=1))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ranks": 3, "replicas": 2}, "cannot be spread over 3 ranks"),
        ({"ranks": 0}, "at least one rank"),
        ({"device": "cuda"}, "no CUDA GPU is visible"),
        ({"device": "mps"}, "CPU or CUDA"),
        ({"ladder": (300.0, 350.0, 2)}, "not a multiple of the 2"),
        ({"timeout_s": 0}, "timeout must be positive"),
    ],
)
def test_impossible_settings_are_refused_before_anything_starts(settings, changes, message):
    if changes.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    run_changes = {k: changes.pop(k) for k in ("replicas", "device", "ladder") if k in changes}
    with pytest.raises(ValueError, match=message):  # settings check themselves when made
        launch_sharded(ShardedSettings(settings(**run_changes), **changes))


# -- the command line ---------------------------------------------------------------------
def test_workbench_run_gpus_writes_gathered_metrics_and_summary(small_model, tmp_path, capsys):
    out = tmp_path / "run"
    args = "run --protein cln025 --replicas 4 --steps 4 --save-interval 2 --device cpu --gpus 2"
    tempering = ["--ladder", "300:360:2", "--exchange-every", "2"]
    code = main([*args.split(), *tempering, "--model", small_model, "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    with open(out / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(int(r["step"]), int(r["replica"])) for r in rows] == [
        (s, r) for s in (2, 4) for r in range(4)
    ]
    for step in (2, 4):  # each exchange group of two replicas holds both temperatures
        temps = sorted(float(r["temperature_set"]) for r in rows if int(r["step"]) == step)
        assert temps == [300.0, 300.0, 360.0, 360.0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ranks"] == 2 and summary["backend"] == "gloo" and summary["steps"] == 4
    assert summary["tempering"]["exchange_rounds"] == 2 and summary["timestep_mol_per_s"] > 0
    printed = capsys.readouterr().out
    assert "2 (gloo)" in printed and "300–360 K" in printed


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--gpus", "2", "--resume", "--out", "x"], "--resume works with --ray"),
        (["--gpus", "2", "--ray", "auto"], "exclude each other"),
        (["--ray", "local"], "--ray needs --out"),
        (["--gpus", "9", "--device", "cpu", "--replicas", "2"], "cannot be spread over 9"),
    ],
)
def test_workbench_run_refuses_contradictory_spreading(extra, message, capsys):
    assert main(["run", "--steps", "1", *extra]) == 2
    assert message in capsys.readouterr().err


# -- NCCL ---------------------------------------------------------------------------------
@pytest.mark.gpu
def test_nccl_ranks_on_two_gpus_gather_metrics_and_exchange(settings):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    run = settings(
        replicas=8,
        steps=8,
        save_interval=4,
        device="cuda",
        ladder=(300.0, 400.0, 4),
        exchange_every=2,
    )
    result = launch_sharded(ShardedSettings(run, ranks=2, timeout_s=300))
    assert result.backend == "nccl" and [r.step for r in result.reports] == [4, 8]
    assert torch.isfinite(result.positions).all() and result.positions.shape == (8, 49, 3)
    ladder = torch.tensor(result.tempering["temperatures"], dtype=torch.float64)
    last = result.reports[-1].metrics["temperature_set"]
    assert np.array_equal(last, ladder[result.levels].numpy())
    assert result.tempering["exchange_rounds"] == 4
