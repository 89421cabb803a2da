"""No command replaces an earlier output without --overwrite, and --overwrite leaves none
of the earlier run's files behind."""

from __future__ import annotations

import json

from fault_runs import STEPS, TINY, run_cli


def test_a_folder_holding_only_trajectories_is_not_overwritten(tmp_path):
    folder = tmp_path / "run"
    (folder / "trajectory").mkdir(parents=True)
    (folder / "trajectory" / "replica_000.dcd").write_bytes(b"frames of an earlier run")
    code, _, err = run_cli(*TINY, "--steps", STEPS, "--out", folder)
    assert code == 2 and "already holds a run (trajectory)" in err
    assert (folder / "trajectory" / "replica_000.dcd").read_bytes() == b"frames of an earlier run"


def test_overwrite_from_four_replicas_to_two_leaves_no_stale_files(tmp_path):
    folder = tmp_path / "run"
    ladder = ["--ladder", "300:400:2", "--exchange-every", "2"]
    assert run_cli(*TINY, "--replicas", "4", *ladder, "--steps", 2, "--out", folder)[0] == 0
    code, _, err = run_cli(*TINY, "--steps", 2, "--out", folder, "--overwrite")
    assert code == 0, err
    assert sorted(p.name for p in (folder / "trajectory").iterdir()) == [
        "replica_000.dcd", "replica_001.dcd", "topology.pdb"]
    assert not (folder / "exchanges.csv").exists()
    assert json.loads((folder / "run.json").read_text())["settings"]["replicas"] == 2


def test_bench_refuses_an_earlier_result_without_overwrite(tmp_path):
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "bench.json").write_text("{}")
    code, _, err = run_cli("bench", "--proteins", "cln025", "--replicas", "1", "--device", "cpu",
                           "--out", folder)
    assert code == 2 and "bench.json already exist(s); pass --overwrite" in err
    assert (folder / "bench.json").read_text() == "{}"
    code, _, err = run_cli("bench", "--proteins", "cln025", "--replicas", "1", "--steps", "1",
                           "--warmup", "1", "--repeats", "1", "--device", "cpu", "--out", folder,
                           "--overwrite")
    assert code == 0, err
    assert json.loads((folder / "bench.json").read_text())["records"]
    assert sorted(p.name for p in folder.iterdir()) == ["bench.json", "bench.md"]  # unlocked


def test_train_refuses_an_earlier_model_without_overwrite(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "cln025.pt").write_bytes(b"an earlier model")
    code, _, err = run_cli("train", "--protein", "cln025", "--generate", "--device", "cpu",
                           "--out", folder)
    assert code == 2 and "cln025.pt already exist(s); pass --overwrite" in err
    assert (folder / "cln025.pt").read_bytes() == b"an earlier model"


def test_analyze_refuses_an_earlier_table_without_overwrite(tmp_path):
    out = tmp_path / "states.json"
    out.write_text("[]")
    code, _, err = run_cli("analyze", "states", tmp_path, "--out", out)
    assert code == 2 and "states.json already exist(s); pass --overwrite" in err
    assert out.read_text() == "[]"
