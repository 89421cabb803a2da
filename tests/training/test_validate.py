"""Validation numbers on synthetic series, a tiny teacher-vs-itself run, the comparison
of two force paths, long runs compared from their metrics files (into the card, where
they gate the default model), and energy gaps of models against their teacher."""

from __future__ import annotations

import csv
import gzip
import json
import math
import re

import pytest
import torch
from helpers import perturbed_positions, prior_potential, tiny_system

from workbench.model.options import KernelOptions
from workbench.teacher import langevin_simulation, state_thresholds, teacher_potential
from workbench.training.validate import (
    compare_end_structures,
    compare_force_paths,
    compare_q,
    compare_runs,
    count_transitions,
    energy_gaps,
    flipped_dihedral_fraction,
    folded_fraction,
    force_rmse,
    histogram_intersection,
    pearson,
    relaxation,
    series_from_metrics,
    validate_against_teacher,
)


def test_histogram_intersection():
    a = torch.linspace(0.0, 0.99, 1000)
    assert math.isclose(histogram_intersection(a, a), 1.0)
    assert histogram_intersection(a * 0.3, 0.6 + a * 0.3) == 0.0


def test_transitions_need_both_thresholds():
    q = torch.tensor([[0.1, 0.5, 0.9, 0.6, 0.3, 0.85], [0.9, 0.5, 0.7, 0.9, 0.45, 0.9]])
    assert count_transitions(q) == (2, 1)
    assert count_transitions(q[1]) == (0, 0)


def test_fractions_correlation_and_rmse():
    q = torch.tensor([0.1, 0.5, 0.9, 0.95])
    assert folded_fraction(q) == 0.5
    assert math.isclose(pearson(q, 3.0 - 2.0 * q), -1.0)
    assert math.isnan(pearson(q, torch.ones(4)))
    assert math.isclose(force_rmse(torch.ones(2, 3), torch.zeros(2, 3)), 1.0)
    result = compare_q(q[None], q[None], (1.0 - q)[None])
    assert all(result["passes"].values())


def test_teacher_validated_against_itself_passes(tmp_path):
    sys = tiny_system()
    teacher = teacher_potential(sys)
    summary = validate_against_teacher(
        sys, teacher, teacher, [300.0, 400.0], 2, 20, 5, plot_path=tmp_path / "v.png",
        series_path=tmp_path / "v.pt",
    )
    assert len(summary["results"]) == 2
    assert all(r["q_intersection"] == 1.0 for r in summary["results"])
    series = torch.load(tmp_path / "v.pt", weights_only=True)
    assert series["temperatures"] == [300.0, 400.0]
    assert series["model_q"].shape == series["teacher_rmsd"].shape == (2, 2, 4)
    assert torch.equal(series["model_q"], series["teacher_q"])
    assert (tmp_path / "v.png").read_bytes()[:8] == PNG_SIGNATURE


def test_force_paths_compared_on_the_same_replicas():
    sys = tiny_system()
    teacher = teacher_potential(sys)
    same = compare_force_paths(
        sys, teacher, {"a": KernelOptions(), "b": KernelOptions()}, 300.0, 2, 20, 5
    )
    assert same["q_intersection"] == 1.0 and same["paths"] == ["a", "b"]
    assert same["folded"]["a"] == same["folded"]["b"]
    with pytest.raises(ValueError, match="two force paths"):
        compare_force_paths(sys, teacher, {"a": KernelOptions()}, 300.0, 2, 20, 5)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# -- long runs compared from their metrics files ------------------------------------------
def write_metrics(path, q, rmsd=None, repeat_last=False):
    """A run's metrics.csv with Q (and RMSD) of shape (R, T), saves 10 steps apart."""
    path.parent.mkdir(parents=True, exist_ok=True)
    q = torch.as_tensor(q, dtype=torch.float32)
    rmsd = 5.0 * (1.0 - q) if rmsd is None else torch.as_tensor(rmsd)
    saves = list(range(q.shape[1])) + ([q.shape[1] - 1] if repeat_last else [])
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "time_ps", "replica", "q", "rmsd", "frozen"])
        for t in saves:
            for r in range(q.shape[0]):
                writer.writerow([10 * (t + 1), 0.04 * (t + 1), r, float(q[r, t]),
                                 float(rmsd[r, t]), 0])
    return path


def test_series_are_read_per_replica_and_save(tmp_path):
    q = torch.tensor([[0.9, 0.3, 0.85], [0.5, 0.55, 0.6]])
    file = write_metrics(tmp_path / "a" / "metrics.csv", q, repeat_last=True)  # resumed run
    series, rmsd, time_ps = series_from_metrics(file)
    torch.testing.assert_close(series, q)
    torch.testing.assert_close(rmsd, 5.0 * (1.0 - q))
    assert math.isclose(time_ps, 0.12)
    file = write_metrics(tmp_path / "b" / "metrics.csv", q)
    lines = file.read_text().splitlines()
    file.write_text("\n".join(lines[:-1]) + "\n")  # replica 1's last save lost
    with pytest.raises(ValueError, match="1 .step, replica. rows are missing"):
        series_from_metrics(file)


def test_long_runs_pass_only_with_overlap_transitions_and_both_states(tmp_path):
    flipping = torch.tensor([[0.9, 0.2] * 6] * 2)  # 2 replicas, 11 events each
    teacher = write_metrics(tmp_path / "teacher.csv", flipping)
    good = compare_runs(write_metrics(tmp_path / "good.csv", flipping), teacher)
    assert good["q_intersection"] == 1.0 and sum(good["events_model"]) == 22
    assert all(good["passes"].values()) and good["replicas"] == 2 and good["saves"] == 12
    stuck = compare_runs(write_metrics(tmp_path / "stuck.csv", torch.full((2, 12), 0.55)), teacher)
    assert not stuck["passes"]["both_states"] and not stuck["passes"]["transitions"]
    assert not stuck["passes"]["q_intersection"]
    few = flipping.clone()
    few[:, 5:] = 0.9  # 4 events per replica: both states, too few transitions
    slow = compare_runs(write_metrics(tmp_path / "slow.csv", few), teacher)
    assert slow["passes"]["both_states"] and not slow["passes"]["transitions"]


def test_long_runs_of_a_teacher_that_stays_folded_need_no_transitions(tmp_path):
    folded = torch.tensor([[0.9, 0.85] * 6] * 2)
    teacher = write_metrics(tmp_path / "teacher.csv", folded)
    held = compare_runs(write_metrics(tmp_path / "held.csv", folded), teacher)
    assert held["events_teacher"] == (0, 0) and held["events_model"] == (0, 0)
    assert set(held["passes"]) == {"q_intersection", "folded_fraction", "rmsd_q_anticorrelated"}
    assert all(held["passes"].values())
    lost = compare_runs(write_metrics(tmp_path / "lost.csv", torch.full((2, 12), 0.3)), teacher)
    assert not lost["passes"]["q_intersection"] and not lost["passes"]["folded_fraction"]


def test_long_runs_count_states_with_a_native_basins_thresholds(tmp_path):
    assert state_thresholds("2jof") == (0.5, 0.3) and state_thresholds("cln025") == (0.8, 0.4)
    breathing = torch.tensor([[0.55, 0.2] * 6] * 2)  # a native basin below Q 0.8
    teacher = write_metrics(tmp_path / "teacher.csv", breathing)
    model = write_metrics(tmp_path / "model.csv", breathing)
    strict = compare_runs(model, teacher)
    assert strict["states"] == [0.8, 0.4] and strict["events_model"] == (0, 0)
    assert strict["folded_model"] == 0.0 and strict["folded_teacher"] == 0.0
    # counted so, the teacher has no events either: nothing to require of the model
    assert "transitions" not in strict["passes"] and "both_states" not in strict["passes"]
    basin = compare_runs(model, teacher, states=state_thresholds("2jof"))
    assert basin["states"] == [0.5, 0.3] and basin["folded_model"] == 0.5
    assert basin["events_model"] == (10, 12) and all(basin["passes"].values())


def test_cli_counts_a_proteins_states_with_its_thresholds(tmp_path, capsys):
    from helpers import small_schnet

    from workbench.cli import main
    from workbench.model.io import save_potential
    from workbench.model.potential import Potential
    from workbench.system import build_system

    model = tmp_path / "2jof.pt"
    potential = Potential(build_system("2jof").bead_types, small_schnet(hidden=8, filters=8), {})
    potential.metadata = {"protein": "2jof", "teacher": {"epsilon": 0.15}}
    save_potential(potential, model)
    breathing = torch.tensor([[0.55, 0.2] * 6] * 2)
    for name in ("model", "teacher"):
        write_metrics(tmp_path / name / "metrics.csv", breathing)
    # a run kept gzipped, as in the repository, is read as it is
    plain = tmp_path / "teacher" / "metrics.csv"
    with gzip.open(plain.with_suffix(".csv.gz"), "wb") as packed:
        packed.write(plain.read_bytes())
    plain.unlink()
    args = ["validate", "--model", str(model), "--runs", str(tmp_path / "model"),
            str(tmp_path / "teacher")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "(10, 12) (fold, unfold; Q 0.5 / 0.3)" in out and re.search(r"verdict +\| pass", out)
    long_run = json.loads((tmp_path / "2jof.json").read_text())["validation"]["long_run"]
    assert long_run["states"] == [0.5, 0.3] and all(long_run["passes"].values())
    assert long_run["teacher_run"] == str(tmp_path / "teacher" / "metrics.csv.gz")
    # a kept run is a file of its own (workbench/models/validation/<model>.teacher-run.csv.gz)
    kept = tmp_path / "2jof-v1.teacher-run.csv.gz"
    (tmp_path / "teacher" / "metrics.csv.gz").rename(kept)
    assert main([*args[:-1], str(kept)]) == 0
    long_run = json.loads((tmp_path / "2jof.json").read_text())["validation"]["long_run"]
    assert long_run["teacher_run"] == str(kept) and all(long_run["passes"].values())


def test_cli_records_a_long_run_that_gates_the_default(tmp_path, capsys):
    from helpers import small_schnet

    from workbench.cli import main
    from workbench.md import LangevinIntegrator, Simulation
    from workbench.model.io import save_potential
    from workbench.model.potential import Potential
    from workbench.models import validation_passed

    model = tmp_path / "cln025.pt"
    potential = Potential(tiny_system().bead_types, small_schnet(hidden=8, filters=8), {})
    potential.metadata = {"protein": "cln025", "teacher": {"epsilon": 0.1}}
    save_potential(potential, model)
    short = {"results": [{"passes": {"q_intersection": True}}]}
    (tmp_path / "cln025.json").write_text(json.dumps({"validation": short}))
    assert validation_passed(model)
    flipping = torch.tensor([[0.9, 0.2] * 6] * 2)
    write_metrics(tmp_path / "teacher" / "metrics.csv", flipping)
    write_metrics(tmp_path / "stuck" / "metrics.csv", torch.full((2, 12), 0.55))
    write_metrics(tmp_path / "good" / "metrics.csv", flipping)
    runs = ["validate", "--model", str(model), "--runs"]
    assert main([*runs, str(tmp_path / "stuck"), str(tmp_path / "teacher")]) == 0
    verdict = (
        "FAIL (q_intersection, folded_fraction, rmsd_q_anticorrelated, transitions, "
        "both_states)"
    )
    assert verdict in capsys.readouterr().out
    card = json.loads((tmp_path / "cln025.json").read_text())
    assert card["validation"]["results"] == short["results"]  # the short one is kept
    plot = tmp_path / "cln025.long_run.png"
    assert card["validation"]["long_run"]["plot"] == str(plot)
    assert plot.read_bytes()[:8] == PNG_SIGNATURE
    assert not validation_passed(model)
    elsewhere = tmp_path / "docs" / "long.png"
    elsewhere.parent.mkdir()
    good = [str(tmp_path / "good"), str(tmp_path / "teacher"), "--plot", str(elsewhere)]
    assert main([*runs, *good]) == 0
    assert validation_passed(model) and f"plot      | {elsewhere}" in capsys.readouterr().out
    assert elsewhere.read_bytes()[:8] == PNG_SIGNATURE
    assert main([*runs, str(tmp_path / "none"), str(tmp_path / "teacher")]) == 2
    assert "no metrics.csv or metrics.csv.gz in" in capsys.readouterr().err
    # with both runs' checkpoints: the two potentials at the runs' final structures
    for name in ("good", "teacher"):
        sim = Simulation(tiny_system(), potential, replicas=2, seed=1,
                         integrator=LangevinIntegrator(0.004, 1.0, 300.0))
        sim.save_checkpoint(tmp_path / name / "checkpoint.pt")
    (tmp_path / "cln025.json").write_text(json.dumps({"validation": None}))  # untested card
    assert main([*runs, *good]) == 0
    out = capsys.readouterr().out
    assert "end structures    | model − teacher energy" in out
    ends = json.loads((tmp_path / "cln025.json").read_text())["validation"]["long_run"]
    assert set(ends["end_structures"]["terms_model_run"]) == {"schnet"}
    assert "teacher terms     | at the model run's / the teacher run's ends" in out
    assert "flipped dihedrals | more than 90° from native at the model run's" in out


def test_end_structures_measure_a_basin_of_the_models_own():
    from helpers import perturbed_positions

    from workbench.model.potential import Potential
    from workbench.model.priors import NativeContacts

    sys = tiny_system()
    teacher = teacher_potential(sys)
    native_like = perturbed_positions(replicas=3, sigma=0.05, seed=1)
    drifted = perturbed_positions(replicas=3, sigma=0.6, seed=2)
    same = compare_end_structures(sys, teacher, teacher, drifted, native_like)
    assert same["energy_gap"] == 0.0 and same["force_rmse_model_run"] == 0.0
    # a model with deeper contact wells than its teacher
    contacts = teacher.priors["contacts"]
    extra = NativeContacts(contacts.index, r0=contacts.r0, epsilon=2.0 * contacts.epsilon)
    model = Potential(sys.bead_types, None, {**teacher.priors, "extra": extra})
    ends = compare_end_structures(sys, model, teacher, drifted, native_like)
    with torch.no_grad():
        expected = extra(drifted).mean() - extra(native_like).mean()
    assert ends["energy_gap"] == pytest.approx(float(expected), rel=1e-4, abs=1e-4)
    assert ends["teacher_spread"] == pytest.approx(float(extra(native_like).std()), rel=1e-4)
    assert ends["force_rmse_model_run"] > 0 and set(ends["terms_model_run"]) == set(model.priors)
    assert ends["terms_model_run"]["extra"] == pytest.approx(float(extra(drifted).mean()))
    # the teacher's own terms at the same structures, where the drift strains them
    assert set(ends["teacher_terms_model_run"]) == set(teacher.priors)
    assert ends["teacher_terms_model_run"]["contacts"] == pytest.approx(
        float(contacts(drifted).mean()), rel=1e-5)
    teacher_terms = ends["teacher_terms_model_run"], ends["teacher_terms_teacher_run"]
    assert teacher_terms[0]["contacts"] > teacher_terms[1]["contacts"]
    # dihedrals flipped away from native: none near native, more after the drift
    assert ends["flipped_dihedrals_teacher_run"] == 0.0
    assert 0.0 < ends["flipped_dihedrals_model_run"] < 1.0


def test_flipped_dihedrals_count_a_mirror_image():
    from workbench.model.geometry import torsions

    sys = tiny_system()
    native = sys.native_positions[None].float()
    assert flipped_dihedral_fraction(sys, native) == 0.0
    # a mirror image negates every dihedral: φ0 moves by 2φ0, beyond 90° for 45° < |φ0| < 135°
    phi0 = torsions(native.double(), sys.dihedrals)[0]
    turned = (phi0.abs() > math.pi / 4) & (phi0.abs() < 3 * math.pi / 4)
    expected = float(turned.double().mean())
    assert 0.0 < expected < 1.0  # the check distinguishes
    mirrored = native * torch.tensor([-1.0, 1.0, 1.0])
    assert flipped_dihedral_fraction(sys, torch.cat([native, mirrored])) == pytest.approx(
        expected / 2)


def test_relaxation_shows_the_teacher_leaving_a_state_and_holding_its_own():
    sys = tiny_system()
    native = sys.native_positions.float().expand(3, -1, -1)
    mirrored = native * torch.tensor([-1.0, 1.0, 1.0])  # every dihedral negated
    teacher = teacher_potential(sys)
    rows = relaxation(sys, teacher, mirrored, [0.4, 2.0], seed=2)
    assert [row["time_ps"] for row in rows] == [0.0, 0.4, 2.0]
    start = langevin_simulation(sys, teacher, 300.0, mirrored).native_q()
    assert rows[0]["q_mean"] == pytest.approx(float(start.mean()))  # distances unchanged
    assert rows[0]["flipped_dihedrals"] == pytest.approx(flipped_dihedral_fraction(sys, mirrored))
    assert rows[0]["flipped_dihedrals"] > 0.1
    assert rows[2]["flipped_dihedrals"] < rows[0]["flipped_dihedrals"] / 2  # turned back
    # from native: the teacher holds the fold, the chain without contact wells loses it
    held = relaxation(sys, teacher, native, [2.0], seed=2)[-1]
    lost = relaxation(sys, teacher_potential(sys, 0.0), native, [2.0], seed=2)[-1]
    assert held["folded_fraction"] == 1.0 and held["q_mean"] > 0.8
    assert lost["folded_fraction"] == 0.0 and lost["q_mean"] < 0.4
    with pytest.raises(ValueError, match="positive and increasing"):
        relaxation(sys, teacher, native, [0.4, 0.2])


def test_relaxation_reports_the_teachers_largest_forces():
    sys = tiny_system()
    teacher = teacher_potential(sys)
    starts = sys.native_positions.float().expand(3, -1, -1).clone()
    starts[1, 0] = starts[1, 3] + 0.3  # bead 0 onto bead 3
    rows = relaxation(sys, teacher, starts, [0.2], seed=1, teacher=teacher)
    largest = teacher.energy_and_forces(starts, None)[1].norm(dim=-1).amax(dim=-1)
    assert rows[0]["teacher_force_median"] == pytest.approx(float(largest.median()))
    assert rows[0]["teacher_force_max"] == pytest.approx(float(largest[1]))
    assert rows[0]["teacher_force_max"] > 10 * rows[0]["teacher_force_median"]
    assert [row["time_ps"] for row in rows] == [0.0, 0.2]
    assert 0.0 < rows[1]["teacher_force_median"] <= rows[1]["teacher_force_max"]
    assert "teacher_force_max" not in relaxation(sys, teacher, starts[:1], [0.2])[0]


def test_the_teacher_runs_as_a_model():
    from workbench.runner import TEACHER_MODEL, choose_potential

    teacher, notice = choose_potential(tiny_system(), TEACHER_MODEL)
    assert teacher.schnet is None and "contacts" in teacher.priors
    assert "Structure-based teacher of cln025" in notice


def test_teacher_variants():
    from workbench.runner import RunSettings, choose_potential, prepare_run

    default, _ = choose_potential(tiny_system(), "teacher")
    deeper, notice = choose_potential(tiny_system(), "teacher:eps=0.5")
    assert deeper.metadata["epsilon"] == 0.5 != default.metadata["epsilon"]
    assert "(ε 0.5 kcal/mol)" in notice
    pos = tiny_system().native_positions[None]
    assert not torch.equal(deeper.energy(pos, None), default.energy(pos, None))
    run = prepare_run(RunSettings(protein="cln025", model="teacher:eps=0.5", replicas=2,
                                  steps=1, device="cpu"))
    assert run.simulation.potential.metadata["epsilon"] == 0.5
    bent = pos + 0.3 * torch.randn(pos.shape, generator=torch.Generator().manual_seed(0))
    softer, notice = choose_potential(tiny_system(), "teacher:eps=0.5,dihedral=0.25")
    assert softer.metadata["dihedral_ratio"] == 0.25 and "dihedral strength 0.25 ε" in notice
    assert not torch.equal(softer.energy(bent, None), deeper.energy(bent, None))
    local, notice = choose_potential(tiny_system(), "teacher:separation=6,eps=0.5")
    assert local.metadata["dihedral_ratio"] is None and local.metadata["contact_separation"] == 6
    assert "contacts 6+ residues apart" in notice
    assert 0 < len(local.priors["contacts"].index) < len(deeper.priors["contacts"].index)
    barred, notice = choose_potential(tiny_system(), "teacher:eps=0.5,barrier=0.4")
    assert "desolvation barriers 0.4 ε" in notice and "barriers" not in deeper.priors
    contacts, barriers = barred.priors["contacts"], barred.priors["barriers"]
    assert torch.equal(barriers.index, contacts.index)
    torch.testing.assert_close(barriers.center, contacts.r0 + 1.5)
    assert torch.all(barriers.height == 0.2)
    for bad, field in (("teacher:", "''"), ("teacher:eps=-1", "eps must be a positive"),
                       ("teacher:eps=deep", "eps must be"), ("teacher:eps=inf", "eps must"),
                       ("teacher:dihedral=0", "dihedral must"),
                       ("teacher:separation=2.5", "separation must be a positive integer"),
                       ("teacher:barrier=-0.1", "barrier must be a non-negative"),
                       ("teacher:eps=1,eps=2", "'eps' is not a field"),
                       ("teacher:depth=1", "'depth' is not a field")):
        with pytest.raises(ValueError, match=field):
            choose_potential(tiny_system(), bad)


def test_run_states_counts_populations_events_and_histogram(tmp_path):
    from workbench.training.validate import run_states

    q = torch.tensor([[0.9, 0.3, 0.9, 0.55], [0.55, 0.55, 0.85, 0.85]])
    states = run_states(write_metrics(tmp_path / "run" / "metrics.csv", q).parent)
    assert states["replicas"] == 2 and states["saves"] == 4
    assert states["folded"] == 0.5 and states["unfolded"] == 0.125
    assert states["mean_q"] == pytest.approx(float(q.double().mean()))
    assert (states["folding_events"], states["unfolding_events"]) == (1, 1)
    assert states["q_histogram"] == [0, 0, 0, 1, 0, 3, 0, 0, 4, 0]
    assert "basin_events" not in states


def test_run_states_counts_events_of_a_native_basin_below_the_folded_threshold(tmp_path):
    from workbench.training.validate import run_states

    # a teacher whose native basin sits at Q 0.55-0.7: no event at 0.8 / 0.4, several at
    # 0.5 / 0.3
    q = torch.tensor([[0.55, 0.2, 0.6, 0.25], [0.1, 0.1, 0.7, 0.7]])
    run = write_metrics(tmp_path / "run" / "metrics.csv", q).parent
    states = run_states(run, basin=(0.5, 0.3))
    assert (states["folding_events"], states["unfolding_events"]) == (0, 0)
    assert states["basin"] == [0.5, 0.3] and states["basin_fraction"] == 0.5
    assert states["basin_events"] == [2, 2]
    for bad in ((0.3, 0.5), (0.5, -0.1), (1.5, 0.3)):
        with pytest.raises(ValueError, match="basin thresholds must satisfy"):
            run_states(run, basin=bad)


def test_long_run_plot_is_optional(tmp_path, monkeypatch):
    import builtins

    from PIL import Image

    from workbench.training.validate import plot_long_runs

    flipping = torch.tensor([[0.9, 0.2] * 6] * 2)
    teacher = write_metrics(tmp_path / "teacher.csv", flipping)
    model = write_metrics(tmp_path / "model.csv", torch.full((2, 12), 0.55))
    assert plot_long_runs({"a": model, "b": teacher}, teacher, tmp_path / "with.png")
    assert (tmp_path / "with.png").read_bytes()[:8] == PNG_SIGNATURE
    assert Image.open(tmp_path / "with.png").mode == "P"  # a palette of 256 colours at most
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert not plot_long_runs({"a": model}, teacher, tmp_path / "without.png")
    assert not (tmp_path / "without.png").exists()


def test_the_teacher_against_itself_has_no_gap_and_a_shifted_one_keeps_none():
    system = tiny_system()
    teacher = prior_potential(system)
    bonds = prior_potential(system, terms=("bonds",))
    sets = {"a": perturbed_positions(system, 3, seed=1).float(),
            "b": perturbed_positions(system, 2, sigma=0.5, seed=2).float()}
    reference = perturbed_positions(system, 4, seed=3).float()
    table = energy_gaps({"self": teacher, "bonds": bonds}, teacher, reference, sets)
    for cell in table["self"].values():
        assert cell["energy_gap"] == pytest.approx(0.0, abs=1e-3)
        assert cell["force_rmse"] == pytest.approx(0.0, abs=1e-4)
    assert set(table["bonds"]) == {"a", "b"} and table["bonds"]["a"]["force_rmse"] > 0
    same = energy_gaps({"bonds": bonds}, teacher, reference, {"ref": reference})
    assert same["bonds"]["ref"]["energy_gap"] == pytest.approx(0.0, abs=1e-3)
