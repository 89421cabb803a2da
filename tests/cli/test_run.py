"""`workbench run`, called in-process: outputs, refusing to overwrite, resuming, clear
errors with exit code 2."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from workbench.cli import main
from workbench.models import shipped_model_file, validation_passed

mdtraj = pytest.importorskip("mdtraj")

# Tiny runs: the default (untrained demo) SchNet is large, so 2 replicas × 4 steps.
RUN = ["run", "--protein", "cln025", "--replicas", "2", "--steps", "4", "--save-interval", "2",
       "--device", "cpu", "--quiet"]


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One completed run (kept pristine; tests work on copies) and its console output."""
    out = tmp_path_factory.mktemp("cli") / "run"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main([*RUN, "--out", str(out)])
    assert code == 0, stderr.getvalue()
    return out, stdout.getvalue()


@pytest.fixture
def run_copy(finished_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished_run[0], out)
    return out


def test_run_writes_metrics_checkpoint_summary_and_trajectories(finished_run):
    out, stdout = finished_run
    assert {"metrics.csv", "checkpoint.pt", "summary.json", "trajectory"} <= {
        p.name for p in out.iterdir()
    }
    rows = read_rows(out / "metrics.csv")
    assert [(int(r["step"]), int(r["replica"])) for r in rows] == [(2, 0), (2, 1), (4, 0), (4, 1)]
    for row in rows:
        assert 0.0 <= float(row["q"]) <= 1.0 and float(row["temperature_set"]) == 300.0

    summary = json.loads((out / "summary.json").read_text())
    assert summary["protein"] == "cln025" and summary["beads"] == 49
    assert summary["replicas"] == 2 and summary["steps"] == 4
    assert summary["timestep_mol_per_s"] > 0 and summary["frozen_replicas"] == []
    # the start-up: before the first step, and the first chunk's excess (2 chunks here)
    assert summary["setup_s"] > 0 and summary["warmup_overhead_s"] >= 0
    assert f"{summary['setup_s']:.1f} s before the first step, then" in stdout
    assert 0.0 <= summary["q_mean"] <= 1.0 and summary["folded_q"] == 0.8

    checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
    assert checkpoint["step"] == 4 and checkpoint["positions"].shape == (2, 49, 3)

    folder = out / "trajectory"
    for r in range(2):
        traj = mdtraj.load(str(folder / f"replica_{r:03d}.dcd"), top=str(folder / "topology.pdb"))
        assert traj.n_frames == 2 and traj.n_atoms == 49
        last = torch.from_numpy(traj.xyz[-1] * 10.0)
        torch.testing.assert_close(last, checkpoint["positions"][r], rtol=0, atol=1e-4)

    # the console: what ran, throughput, Q, which model (the shipped one where its card
    # records a passed validation, else the demo model with a pointer to the trained one)
    assert "cln025: 49 beads, 2 replicas, 300 K, dt 4 fs on cpu" in stdout
    assert "timestep·mol/s" in stdout and "ns/day" in stdout
    q_line = next(line for line in stdout.splitlines() if line.startswith("Q "))
    assert f"{summary['q_mean']:.3f} mean" in q_line
    shipped = shipped_model_file("cln025", "five-bead")
    if validation_passed(shipped):
        assert "Trained model shipped for cln025, validated against its teacher" in stdout
        assert "Untrained demo model" not in stdout
    else:
        assert "Untrained demo model" in stdout and f"A trained model ships ({shipped})" in stdout


def test_rerun_without_overwrite_fails_and_leaves_files(run_copy, capsys):
    before = snapshot(run_copy)
    code = main([*RUN, "--out", str(run_copy)])
    assert code == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "--overwrite" in err and "--resume" in err
    assert snapshot(run_copy) == before


def test_overwrite_replaces_the_run(run_copy, capsys):
    code = main([*RUN, "--steps", "2", "--out", str(run_copy), "--overwrite"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((run_copy / "summary.json").read_text())["steps"] == 2
    assert [int(r["step"]) for r in read_rows(run_copy / "metrics.csv")] == [2, 2]


def test_resume_continues_the_run(run_copy, capsys):
    before = torch.load(run_copy / "checkpoint.pt", weights_only=True)
    code = main([*RUN, "--out", str(run_copy), "--resume"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "resumed from step 4" in captured.out
    summary = json.loads((run_copy / "summary.json").read_text())
    assert summary["steps"] == 8
    after = torch.load(run_copy / "checkpoint.pt", weights_only=True)
    assert after["step"] == 8 and not torch.equal(after["positions"], before["positions"])
    # earlier rows and frames are kept, the new ones follow
    rows = read_rows(run_copy / "metrics.csv")
    assert [int(r["step"]) for r in rows] == [2, 2, 4, 4, 6, 6, 8, 8]
    folder = run_copy / "trajectory"
    traj = mdtraj.load(str(folder / "replica_001.dcd"), top=str(folder / "topology.pdb"))
    assert traj.n_frames == 4
    torch.testing.assert_close(torch.from_numpy(traj.xyz[1] * 10.0), before["positions"][1],
                               rtol=0, atol=1e-4)


def test_resume_continues_bitwise_like_one_long_run(run_copy, tmp_path, capsys):
    assert main([*RUN, "--out", str(run_copy), "--resume"]) == 0
    long = tmp_path / "long"
    assert main([*RUN, "--steps", "8", "--out", str(long)]) == 0
    capsys.readouterr()
    a = torch.load(run_copy / "checkpoint.pt", weights_only=True)
    b = torch.load(long / "checkpoint.pt", weights_only=True)
    assert torch.equal(a["positions"], b["positions"])
    assert torch.equal(a["velocities"], b["velocities"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--replicas", "0"], "--replicas must be at least 1, got 0"),
        (["--protein", "notaprotein"], "unknown protein 'notaprotein'"),
        (["--temperature", "-10"], "--temperature must be positive"),
        (["--steps", "-1"], "--steps must be non-negative"),
        (["--kernels", "warp_drive"], "unknown kernel technique"),
        (["--resume"], "--resume needs --out"),
        (["--model", "no/such/model.pt"], "no model file"),
        (["--ladder", "300:400:3"], "--replicas 2 is not a multiple of the 3 ladder levels"),
        (["--ladder", "300-400"], "--ladder must be T_MIN:T_MAX:LEVELS"),
        (["--ladder", "400:300:2"], "--ladder: the highest temperature must exceed the lowest"),
        (["--ladder", "300:400:2", "--exchange-every", "0"], "--exchange-every must be at least"),
        (["--denatured-fraction", "1.5"], "--denatured-fraction must be in [0, 1], got 1.5"),
        (["--skin", "nan"], "--skin must be a non-negative distance (Å), got nan"),
        (["--temperature", "inf"], "--temperature must be positive"),
        (["--friction", "nan"], "--friction must be non-negative"),
        (["--denatured-fraction", "0.5", "--denature-steps", "0"],
         "--denature-steps must be at least 1"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(extra, message, capsys):
    code = main([*RUN, *extra])
    captured = capsys.readouterr()
    assert code == 2
    assert message in captured.err
    assert captured.err.startswith("error: ") and "Traceback" not in captured.err


# -- parallel tempering ----------------------------------------------------------------
LADDER = ["--ladder", "300:400:2", "--exchange-every", "2", "--no-trajectory"]


def test_ladder_run_logs_exchanges_and_resumes_bitwise(tmp_path, capsys):
    out, long = tmp_path / "ladder", tmp_path / "long"
    assert main([*RUN, *LADDER, "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "2 replicas, 300–400 K in 2 levels" in stdout
    assert "Parallel tempering: 2 levels (300, 400 K) × 1 walkers" in stdout
    row = next(line for line in stdout.splitlines() if line.startswith("exchange acceptance"))
    summary = json.loads((out / "summary.json").read_text())["tempering"]
    rate = summary["acceptance"]["300–400 K"]
    assert summary["rounds"] == 2 and 0.0 <= rate <= 1.0 and f"300–400 K {rate:.0%}" in row
    # the metrics show each replica's bath; the exchange log one row per round
    rows = read_rows(out / "metrics.csv")
    assert sorted(float(r["temperature_set"]) for r in rows[:2]) == [300.0, 400.0]
    exchanges = read_rows(out / "exchanges.csv")
    assert [int(r["step"]) for r in exchanges] == [2, 4]

    assert main([*RUN, *LADDER, "--out", str(out), "--resume"]) == 0
    assert main([*RUN, *LADDER, "--steps", "8", "--out", str(long)]) == 0
    capsys.readouterr()
    a = torch.load(out / "checkpoint.pt", weights_only=True)
    b = torch.load(long / "checkpoint.pt", weights_only=True)
    assert a["step"] == 8
    assert torch.equal(a["positions"], b["positions"])
    assert torch.equal(a["velocities"], b["velocities"])
    a, b = a["extra"]["tempering"], b["extra"]["tempering"]  # one unit with the checkpoint
    assert a["rounds"] == 4 and torch.equal(a["level_of_replica"], b["level_of_replica"])
    assert torch.equal(a["rng_state"], b["rng_state"])
    assert len(read_rows(out / "exchanges.csv")) == 4

    # resuming needs the same kind of run
    assert main([*RUN, "--no-trajectory", "--out", str(out), "--resume"]) == 2
    assert "cannot change: --ladder [300.0, 400.0, 2] → None" in capsys.readouterr().err
    assert main([*RUN, "--no-trajectory", "--out", str(long), "--overwrite"]) == 0
    assert not (long / "exchanges.csv").exists()
    assert main([*RUN, *LADDER, "--out", str(long), "--resume"]) == 2
    assert "cannot change: --ladder None → [300.0, 400.0, 2]" in capsys.readouterr().err


def test_the_summary_lists_the_kernels_that_ran_not_those_asked_for(tmp_path, capsys):
    out = tmp_path / "teacher"
    assert main([*RUN, "--model", "teacher", "--kernels", "all", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kernels_requested"]["fused_message_passing"] is True
    assert summary["kernels"]["fused_message_passing"] is False  # a prior-only model
    assert "fused_message_passing" not in capsys.readouterr().out.split("kernels:")[1]


def test_resume_without_a_checkpoint(tmp_path, capsys):
    assert main([*RUN, "--out", str(tmp_path / "fresh"), "--resume"]) == 2
    assert "no checkpoint.pt" in capsys.readouterr().err


def test_resume_with_other_replica_count(run_copy, capsys):
    before = snapshot(run_copy)
    assert main([*RUN, "--replicas", "3", "--out", str(run_copy), "--resume"]) == 2
    assert "cannot change: --replicas 2 → 3" in capsys.readouterr().err
    assert snapshot(run_copy) == before


def test_unwritable_output_folder(tmp_path, capsys):
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a folder")
    code = main([*RUN, "--out", str(blocker / "run")])
    assert code == 2
    err = capsys.readouterr().err
    assert "output folder" in err and "is not writable" in err
    assert blocker.read_text() == "not a folder"


def test_model_option_uses_a_saved_potential(tmp_path, capsys):
    from helpers import schnet_potential, tiny_system

    from workbench.model import save_potential

    path = save_potential(schnet_potential(tiny_system()), tmp_path / "small.pt")
    assert main([*RUN, "--model", str(path), "--no-trajectory", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "Untrained demo model" not in out
    assert not (tmp_path / "r" / "trajectory").exists()


def test_folded_fraction_uses_the_proteins_native_basin(tmp_path, capsys):
    out = tmp_path / "r"
    args = ["run", "--protein", "2jof", "--model", "teacher", "--replicas", "2", "--steps", "2",
            "--device", "cpu", "--quiet", "--no-trajectory", "--out", str(out)]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["folded_q"] == 0.5 and summary["folded_fraction"] == 1.0  # native starts
    assert "folded (Q > 0.5) | 100%" in capsys.readouterr().out


def test_calibration_counts_folded_with_the_proteins_native_basin(tmp_path, monkeypatch):
    import workbench.teacher as teacher

    asked = {}

    def recorded(system, *args, **kwargs):
        asked[system.name] = kwargs["folded_q"]
        raise RuntimeError("recorded")

    monkeypatch.setattr(teacher, "calibrate_epsilon", recorded)
    for protein in ("2jof", "cln025"):
        with pytest.raises(RuntimeError, match="recorded"):
            main(["train", "--protein", protein, "--generate", "--calibrate", "0.5",
                  "--device", "cpu", "--quiet", "--out", str(tmp_path)])
    assert asked == {"2jof": 0.5, "cln025": 0.8}


def test_run_without_out_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*RUN, "--steps", "2"]) == 0
    assert "none (no --out)" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_denatured_fraction_starts_that_share_of_replicas_unfolded():
    """The last round(f R) replicas start from chains run without contact wells: far from
    native (low Q); the others start native; the same seed gives the same starts."""
    from workbench.runner import RunSettings, prepare_run
    from workbench.teacher import mixed_starts

    settings = RunSettings(protein="cln025", replicas=4, steps=0, device="cpu", model="teacher",
                           denatured_fraction=0.5, denature_steps=1500, seed=3)
    sim = prepare_run(settings).simulation
    native = sim.system.native_positions
    assert torch.equal(sim.positions[:2], native.expand(2, -1, -1))
    q = sim.native_q()
    assert (q[:2] > 0.9).all() and (q[2:] < 0.5).all(), q
    assert torch.equal(mixed_starts(sim.system, 300.0, 4, 2, 1500, "cpu", 3), sim.positions)
    few = prepare_run(replace(settings, denatured_fraction=0.1)).simulation  # round(0.4) = 0
    assert torch.equal(few.positions, native.expand(4, -1, -1))


def test_ctrl_c_stops_cleanly_and_the_run_resumes_from_its_last_save(
    finished_run, tmp_path, monkeypatch, capsys
):
    import workbench.cli.run as cli

    real = cli.timed_steps

    def interrupted_after_the_first_save(sim, *args, **kwargs):
        if sim.step_count == 2:
            raise KeyboardInterrupt
        real(sim, *args, **kwargs)

    monkeypatch.setattr(cli, "timed_steps", interrupted_after_the_first_save)
    out = tmp_path / "run"
    code = main([*RUN, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 130
    assert "Traceback" not in captured.err
    assert "interrupted at step 2; --resume continues from step 2" in captured.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["steps"] == 2
    assert [int(r["step"]) for r in read_rows(out / "metrics.csv")] == [2, 2]
    assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == 2

    monkeypatch.setattr(cli, "timed_steps", real)
    assert main([*RUN, "--steps", "2", "--out", str(out), "--resume"]) == 0
    capsys.readouterr()
    assert [int(r["step"]) for r in read_rows(out / "metrics.csv")] == [2, 2, 4, 4]
    resumed = torch.load(out / "checkpoint.pt", weights_only=True)
    straight = torch.load(finished_run[0] / "checkpoint.pt", weights_only=True)
    assert torch.equal(resumed["positions"], straight["positions"])
    assert not json.loads((out / "summary.json").read_text())["interrupted"]


def test_progress_shows_from_the_first_step_and_saves_stay_on_their_interval(
    tmp_path, monkeypatch
):
    import workbench.cli.run as cli

    real, sizes, meters = cli.timed_steps, [], []

    def recorded(sim, meter, steps, *args, **kwargs):
        sizes.append(steps)
        meters.append(meter)
        real(sim, meter, steps, *args, **kwargs)

    monkeypatch.setattr(cli, "timed_steps", recorded)
    out = tmp_path / "run"
    args = ["run", "--protein", "cln025", "--model", "demo", "--replicas", "2", "--steps",
            "20", "--save-interval", "8", "--device", "cpu", "--quiet", "--out", str(out)]
    assert main(args) == 0
    assert sizes == [1, 2, 4, 1, 8, 4]  # doubling, never across the saves at 8 and 16
    assert [steps for steps, _ in meters[0].chunks] == [8, 8, 4]  # one chunk per save
    assert [int(r["step"]) for r in read_rows(out / "metrics.csv")][::2] == [8, 16]


# -- the network ------------------------------------------------------------------------


def test_arch_runs_the_demo_model_of_that_network_and_says_what_ran(tmp_path, capsys):
    # 2JOF: no EGNN ships for it, so --arch egnn takes the demo model
    out = tmp_path / "egnn"
    assert main(["run", "--protein", "2jof", "--replicas", "2", "--steps", "4",
                 "--save-interval", "2", "--device", "cpu", "--arch", "egnn", "--kernels",
                 "fused_update+pair_filter", "--no-trajectory", "--out", str(out)]) == 0
    captured = capsys.readouterr().out
    assert "random CGEGNN weights" in captured
    assert "CGEGNN has no fused kernels for fused_update, pair_filter" in captured
    assert json.loads((out / "run.json").read_text())["settings"]["architecture"] == "egnn"


def test_arch_must_match_the_model_file(tmp_path, capsys):
    from workbench.model.io import save_potential
    from workbench.model.native_priors import demo_potential
    from workbench.system import build_system

    path = save_potential(demo_potential(build_system("cln025"), architecture="painn"),
                          tmp_path / "painn.pt")
    assert main([*RUN, "--model", str(path), "--arch", "schnet"]) == 2
    assert "--arch is 'schnet', but the model" in capsys.readouterr().err
    assert main([*RUN, "--model", str(path), "--arch", "painn", "--no-trajectory"]) == 0
    # without --arch the file's network runs
    assert main([*RUN, "--model", str(path), "--no-trajectory", "--overwrite"]) == 0
