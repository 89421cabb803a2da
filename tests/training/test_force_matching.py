"""Force matching on a tiny SchNet, the moving average of its weights, the training pipeline,
its files and the CLI."""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from helpers import small_config, small_schnet, tiny_system

from workbench import models
from workbench.cli import main
from workbench.model.io import load_potential, save_potential
from workbench.model.potential import Potential
from workbench.runner import choose_potential
from workbench.teacher import teacher_potential
from workbench.training import force_matching
from workbench.training.boltzmann_inversion import fit_priors
from workbench.training.data import (
    generate_teacher_data,
    load_teacher_data,
    save_teacher_data,
    split_indices,
)
from workbench.training.force_matching import (
    LOG_COLUMNS,
    FitSettings,
    WeightAverage,
    potential_labels,
    prior_labels,
    train_force_matching,
)
from workbench.training.model_card import read_epoch_log
from workbench.training.pipeline import TrainSettings, train_potential
from workbench.training.relative_entropy import EnsembleSet, OnlineEnsemble, OnlineSettings

TINY = {"hidden": 8, "filters": 8, "blocks": 1, "num_rbf": 6, "cutoff": 5.0}


@pytest.fixture(scope="module")
def data():
    sys = tiny_system()
    return generate_teacher_data(sys, teacher_potential(sys), [300.0], 4, 200, 10, seed=0)


@pytest.fixture(scope="module")
def priors(data):
    return fit_priors(tiny_system(), data["positions"], 300.0)


@pytest.fixture(scope="module")
def residual(data, priors):
    return data["forces"] - prior_labels(tiny_system().bead_types, priors, data["positions"])[1]


@pytest.fixture(scope="module")
def residual_energy(data, priors):
    """Teacher energies less the priors', (M,)."""
    sys = tiny_system()
    teacher = potential_labels(teacher_potential(sys), data["positions"])[0]
    return teacher - prior_labels(sys.bead_types, priors, data["positions"])[0]


def test_split_is_disjoint_and_seeded():
    train, val = split_indices(50, 0.2, seed=3)
    assert len(val) == 10 and not set(train.tolist()) & set(val.tolist())
    assert torch.equal(val, split_indices(50, 0.2, seed=3)[1])


def test_force_matching_lowers_validation_loss_and_logs(data, residual, tmp_path):
    train, val = split_indices(data["positions"].shape[0], 0.25)
    pos = data["positions"]
    settings = FitSettings(epochs=4, batch_size=16, learning_rate=3e-3, patience=10)
    result = train_force_matching(
        small_schnet(**TINY), tiny_system().bead_types, (pos[train], residual[train]),
        (pos[val], residual[val]), settings, tmp_path / "log.csv", progress=False,
    )
    losses = [row["val_loss"] for row in result.history]
    assert min(losses[1:]) < losses[0]
    assert not result.stopped_early
    with open(tmp_path / "log.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 and tuple(rows[0]) == LOG_COLUMNS


def test_validation_energy_rmse_is_the_centred_error(data, residual, residual_energy):
    sys = tiny_system()
    schnet = small_schnet(**TINY)
    pos = data["positions"]
    # learning rate 0: the logged numbers are those of the initial weights
    settings = FitSettings(epochs=1, batch_size=7, learning_rate=0.0, energy_weight=2.0)
    val = (pos, residual, residual_energy + 123.0)  # a constant offset changes nothing
    row = train_force_matching(
        schnet, sys.bead_types, val, val, settings, progress=False
    ).history[0]
    energy, forces = potential_labels(Potential(sys.bead_types, schnet), pos)
    error = energy - residual_energy
    energy_rmse = float((error - error.mean()).square().mean().sqrt())
    force_mse = float((forces - residual).square().mean())
    assert row["val_energy_rmse"] == pytest.approx(energy_rmse, rel=1e-5)
    assert row["val_force_rmse"] == pytest.approx(math.sqrt(force_mse), rel=1e-5)
    assert row["val_loss"] == pytest.approx(
        force_mse + 2.0 * energy_rmse**2 / pos.shape[1], rel=1e-5
    )


def test_labels_are_batched_by_beads(data, monkeypatch):
    """Frames per batch follow the bead budget, and batching changes no label."""
    sys = tiny_system()
    potential = Potential(sys.bead_types, small_schnet(**TINY))
    pos = data["positions"][:10]
    whole = potential_labels(potential, pos, batch_size=10)
    sizes = []
    original = force_matching.model_energy_and_forces

    def counted(model, frames, create_graph=False):
        sizes.append(frames.shape[0])
        return original(model, frames, create_graph)

    monkeypatch.setattr(force_matching, "model_energy_and_forces", counted)
    monkeypatch.setattr(force_matching, "LABEL_BEADS_PER_BATCH", 3 * pos.shape[1] + 1)
    batched = potential_labels(potential, pos)
    assert sizes == [3, 3, 3, 1]
    torch.testing.assert_close(batched[0], whole[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(batched[1], whole[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("weight", [-1.0, float("nan")])
def test_energy_weight_must_be_non_negative(weight):
    with pytest.raises(ValueError, match="energy_weight must be a finite number >= 0"):
        FitSettings(energy_weight=weight)


def test_energy_term_fits_the_energies_better(data, residual, residual_energy):
    sys = tiny_system()
    pos = data["positions"]
    train, val = split_indices(pos.shape[0], 0.25)
    targets = (pos, residual, residual_energy)

    def final_energy_rmse(weight):
        settings = FitSettings(epochs=15, batch_size=8, learning_rate=1e-2, energy_weight=weight)
        return train_force_matching(
            small_schnet(**TINY), sys.bead_types, tuple(t[train] for t in targets),
            tuple(t[val] for t in targets), settings, progress=False,
        ).history[-1]["val_energy_rmse"]

    # (on these frames: ~55 kcal/mol from forces alone, ~29 with the energy term)
    assert final_energy_rmse(10.0) < 0.8 * final_energy_rmse(0.0)


def test_gradient_clipping_limits_each_step_and_logs_the_norms(data, residual, monkeypatch):
    pos, sys = data["positions"][:16], tiny_system()
    norms = []
    step = torch.optim.Adam.step

    def recording(self, *args, **kwargs):  # the gradient norm each step applies
        norms.append(float(torch.cat([p.grad.flatten() for p in schnet.parameters()]).norm()))
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording)

    def fit(clip):
        nonlocal schnet
        schnet = small_schnet(**TINY)
        settings = FitSettings(epochs=2, batch_size=4, learning_rate=1e-2, grad_clip=clip)
        return train_force_matching(schnet, sys.bead_types, (pos, residual[:16]),
                                    (pos, residual[:16]), settings, progress=False)

    schnet = None
    free = fit(0.0)
    free_norms, norms[:] = list(norms), []
    assert free.clipped_steps == 0 and len(free_norms) == 8
    medians = [row["grad_norm"] for row in free.history]
    assert medians == pytest.approx([float(torch.tensor(free_norms[:4]).median()),
                                     float(torch.tensor(free_norms[4:]).median())])
    limit = 0.5 * min(free_norms)
    clipped = fit(limit)
    assert clipped.clipped_steps == 8 and max(norms) == pytest.approx(limit, rel=1e-5)
    assert all(row["grad_norm"] > 1.5 * limit for row in clipped.history)  # before clipping
    assert clipped.history[-1]["val_loss"] != free.history[-1]["val_loss"]
    with pytest.raises(ValueError, match="grad_clip must be a finite number >= 0"):
        FitSettings(grad_clip=-1.0)


def test_early_stopping_keeps_the_best_epoch(data, residual):
    pos = data["positions"][:20]
    settings = FitSettings(epochs=50, batch_size=10, learning_rate=0.0, patience=2)
    result = train_force_matching(
        small_schnet(**TINY), tiny_system().bead_types, (pos, residual[:20]),
        (pos, residual[:20]), settings, progress=False,
    )
    assert result.stopped_early and result.best_epoch == 1 and len(result.history) == 3


@pytest.mark.parametrize("limit", ["time_limit", "deadline"])
def test_time_limit_ends_training_after_the_current_batch(data, residual, limit):
    # a deadline is a monotonic-clock reading: one already past stops training the same way
    pos = data["positions"][:20]
    settings = FitSettings(epochs=50, batch_size=10, learning_rate=1e-3,
                           **{limit: 0.0 if limit == "time_limit" else time.monotonic()})
    result = train_force_matching(
        small_schnet(**TINY), tiny_system().bead_types, (pos, residual[:20]),
        (pos, residual[:20]), settings, progress=False,
    )
    assert result.stopped_by_time and not result.stopped_early and len(result.history) == 1
    # one batch of the two was trained: the logged training loss is over its frames only
    (row,) = result.history
    assert math.isfinite(row["train_loss"]) and result.best_epoch == 1


def test_selection_runs_end_within_the_deadline(data, residual):
    # every selection run takes 1 s: the deadline is brought forward by that, so training
    # stops after the selection run that ends within a second of it (here epoch 2's)
    # instead of starting another epoch whose selection run would end past it
    pos = data["positions"][:20]

    def selector():
        time.sleep(1.0)
        return 0.0

    deadline = time.monotonic() + 3.0
    settings = FitSettings(epochs=50, batch_size=10, learning_rate=1e-3, select_every=1,
                           deadline=deadline)
    result = train_force_matching(
        small_schnet(**TINY), tiny_system().bead_types, (pos, residual[:20]),
        (pos, residual[:20]), settings, progress=False, selector=selector,
    )
    assert time.monotonic() < deadline
    assert result.stopped_by_time and len(result.history) == 2
    assert [row["epoch"] for row in result.selection] == [1, 2]


@pytest.mark.parametrize(
    ("every", "scored", "scores"), [(1, [1, 2, 3], [0.5, 0.1, 0.3]), (2, [2, 3], [0.1, 0.3])]
)
def test_a_selector_chooses_the_kept_epoch(data, residual, every, scored, scores):
    pos = data["positions"][:20]
    schnet = small_schnet(**TINY)
    seen = []  # the weights of each call

    def selector():
        seen.append({k: v.clone() for k, v in schnet.state_dict().items()})
        return scores[len(seen) - 1]

    settings = FitSettings(epochs=3, batch_size=10, learning_rate=3e-3, select_every=every)
    result = train_force_matching(
        schnet, tiny_system().bead_types, (pos, residual[:20]), (pos, residual[:20]),
        settings, progress=False, selector=selector,
    )
    assert [row["epoch"] for row in result.selection] == scored and len(seen) == len(scored)
    assert [row["score"] for row in result.selection] == scores
    assert result.best_epoch == 2  # the lowest score, not the lowest validation loss
    kept = seen[scored.index(2)]
    for key, value in schnet.state_dict().items():
        assert torch.equal(value, kept[key]), key
    assert any(not torch.equal(kept[k], seen[-1][k]) for k in kept)  # the last ones differ


def test_tf32_runs_only_the_optimiser_steps_with_tf32_products(data, residual, monkeypatch):
    import workbench.training.force_matching as fm

    pos = data["positions"][:20]
    seen = []  # (create_graph, matmul precision) of every batch-error call
    real = fm._batch_errors

    def recording(potential, pos, target, energies, create_graph):
        seen.append((create_graph, torch.get_float32_matmul_precision()))
        return real(potential, pos, target, energies, create_graph)

    monkeypatch.setattr(fm, "_batch_errors", recording)
    before = torch.get_float32_matmul_precision()
    for tf32 in (False, True):
        seen.clear()
        result = train_force_matching(
            small_schnet(**TINY), tiny_system().bead_types, (pos, residual[:20]),
            (pos, residual[:20]), FitSettings(epochs=2, batch_size=10, tf32=tf32),
            progress=False,
        )
        steps = {p for graph, p in seen if graph}
        checks = {p for graph, p in seen if not graph}
        assert steps == {"high" if tf32 else "highest"} and checks == {"highest"}
        assert torch.get_float32_matmul_precision() == before
        if tf32:  # measured against FP32 (exactly 0 where the device has no TF32)
            assert 0.0 <= result.tf32_force_error < 1e-2
        else:
            assert result.tf32_force_error is None


def test_matmul_precision_is_restored_after_an_error():
    from workbench.training.force_matching import float32_matmul_precision

    before = torch.get_float32_matmul_precision()
    with pytest.raises(RuntimeError, match="inside"), float32_matmul_precision("high"):
        assert torch.get_float32_matmul_precision() == "high"
        raise RuntimeError("inside")
    assert torch.get_float32_matmul_precision() == before


def test_pipeline_saves_a_loadable_model_and_card(data, tmp_path, monkeypatch):
    sys = tiny_system()
    settings = TrainSettings(
        schnet=small_config(**TINY), fit=FitSettings(epochs=2, batch_size=20),
        validate_steps=20, validate_replicas=2, progress=False,
    )
    potential, card = train_potential(sys, teacher_potential(sys), data, settings, tmp_path)
    card_file = json.loads((tmp_path / "cln025.json").read_text())
    assert card_file["teacher"]["epsilon"] == card["teacher"]["epsilon"]
    assert card_file["data"]["frames"] == data["positions"].shape[0]
    assert card_file["training"]["val_force_rmse"] > 0
    assert card_file["training"]["val_energy_rmse"] > 0
    assert card_file["training"]["energy_weight"] == 0.0
    assert card_file["training"]["tf32"] is False
    assert card_file["training"]["tf32_force_error"] is None
    assert card_file["priors"]["repulsion_min_separation"] == 5
    assert card_file["priors"]["repulsion_grouping"] == "pair"
    assert card_file["priors"]["repulsion_pairs"] == potential.priors["repulsion"].index.shape[0]
    assert card_file["priors"]["dihedral_degree"] == 3
    assert 0 <= card_file["priors"]["dihedrals_with_a_non_native_minimum"] <= len(sys.dihedrals)
    assert card_file["validation"]["force_rmse"] > 0
    loaded = load_potential(tmp_path / "cln025.pt")
    assert loaded.metadata["trained"] and set(loaded.priors) == set(potential.priors)
    # shipped-model lookup: <package>/models/data/<protein>-v<N>.pt, the default once validated
    (tmp_path / "data").mkdir()
    for suffix in (".pt", ".json"):
        (tmp_path / f"cln025{suffix}").rename(tmp_path / "data" / f"cln025-v1{suffix}")
    # the package's data folder, for the model lookup alone (bundled structures stay found)
    monkeypatch.setattr(models, "resources", SimpleNamespace(files=lambda _: tmp_path))
    card_file["validation"]["results"][0]["passes"] = {"q_intersection": False}
    (tmp_path / "data" / "cln025-v1.json").write_text(json.dumps(card_file))
    demo, notice = choose_potential(sys, None)
    assert not demo.metadata.get("trained") and "has not passed its validation" in notice
    card_file["validation"]["results"][0]["passes"] = {"q_intersection": True}
    (tmp_path / "data" / "cln025-v1.json").write_text(json.dumps(card_file))
    shipped, notice = choose_potential(sys, None)
    assert "validated against its teacher" in notice and shipped.metadata["trained"]


def test_training_continues_from_a_saved_model(data, tmp_path):
    sys = tiny_system()
    fit = FitSettings(epochs=2, batch_size=20)
    first = TrainSettings(schnet=small_config(**TINY), fit=fit, progress=False)
    model, first_card = train_potential(sys, teacher_potential(sys), data, first, tmp_path)
    more = TrainSettings(
        schnet=small_config(), fit=FitSettings(epochs=1, batch_size=20, learning_rate=0.0),
        progress=False, start_from=str(tmp_path / "cln025.pt"),
    )
    resumed, card = train_potential(sys, teacher_potential(sys), data, more, tmp_path)
    # learning rate 0: the weights are exactly those it started from, the priors are kept
    for (name, a), b in zip(model.state_dict().items(), resumed.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name
    assert resumed.schnet.config == model.schnet.config  # the saved sizes, not TrainSettings'
    assert card["training"]["continued_from"]["epochs_before"] == 2
    # the card keeps the record of how the priors were fitted, and where they came from
    assert card["priors"]["method"] == first_card["priors"]["method"] == "Boltzmann inversion"
    assert card["priors"]["repulsion_pairs"] == first_card["priors"]["repulsion_pairs"]
    assert card["priors"]["kept_from"] == [str(tmp_path / "cln025.pt")]
    # the card's log continues the first model's; the CSV has this call's epoch
    assert [row["epoch"] for row in read_epoch_log(tmp_path / "cln025.pt")] == [1, 2, 3]
    assert card["training"]["log"]["columns"] == list(LOG_COLUMNS)
    with open(tmp_path / "cln025.log.csv", newline="") as handle:
        assert [row["epoch"] for row in csv.DictReader(handle)] == ["1"]
    bare = tmp_path / "other.pt"
    save_potential(Potential(sys.bead_types, small_schnet(**TINY), {}), bare)
    wrong = TrainSettings(schnet=small_config(**TINY), fit=fit, progress=False,
                          start_from=str(bare))
    with pytest.raises(ValueError, match="cannot be continued for cln025"):
        train_potential(sys, teacher_potential(sys), data, wrong, tmp_path / "x")
    with pytest.raises(ValueError, match="trained on a teacher with epsilon"):
        train_potential(sys, teacher_potential(sys, 9.0), data, more, tmp_path / "y")
    # continued priors are kept, never refitted: another repulsion form is refused
    other_form = TrainSettings(schnet=small_config(), fit=fit, progress=False,
                               start_from=str(tmp_path / "cln025.pt"), prior_repulsion="cutoff")
    kept = r"keeps its priors when continued \(its repulsion: Repulsion\)"
    with pytest.raises(ValueError, match=kept):
        train_potential(sys, teacher_potential(sys), data, other_form, tmp_path / "z")
    other_pairs = replace(other_form, prior_repulsion=None, prior_repulsion_separation=4)
    with pytest.raises(ValueError, match="leave out the repulsion separation"):
        train_potential(sys, teacher_potential(sys), data, other_pairs, tmp_path / "z")
    other_classes = replace(other_pairs, prior_repulsion_separation=None,
                            prior_repulsion_grouping="name")
    with pytest.raises(ValueError, match="leave out the repulsion grouping"):
        train_potential(sys, teacher_potential(sys), data, other_classes, tmp_path / "z")
    other_series = replace(other_pairs, prior_repulsion_separation=None,
                           prior_dihedral_degree=1)
    with pytest.raises(ValueError, match="leave out the dihedral degree"):
        train_potential(sys, teacher_potential(sys), data, other_series, tmp_path / "z")
    refitted = replace(other_series, prior_dihedral_degree=None, prior_refinement=True)
    with pytest.raises(ValueError, match="leave out the prior refinement"):
        train_potential(sys, teacher_potential(sys), data, refitted, tmp_path / "z")


def test_cli_train_generates_then_reuses_data(tmp_path, capsys):
    common = ["--protein", "cln025", "--hidden", "8", "--filters", "8", "--blocks", "1",
              "--num-rbf", "6", "--cutoff", "5", "--epochs", "1", "--batch-size", "8",
              "--device", "cpu", "--quiet"]
    data_file = tmp_path / "teacher.pt"
    assert main(["train", "--generate", "--replicas", "2", "--steps", "40", "--save-every",
                 "10", "--equilibration", "0", "--save-data", str(data_file),
                 "--repulsion", "cutoff", "--contact-barrier", "0.4",
                 "--out", str(tmp_path / "a"), *common]) == 0
    assert json.loads((tmp_path / "a" / "cln025.json").read_text())["priors"]["repulsion"] == (
        "cutoff"
    )
    assert "cutoff" in load_potential(tmp_path / "a" / "cln025.pt").priors["repulsion"].state_dict()
    data, metadata = load_teacher_data(data_file)
    assert data["positions"].shape[0] == 8 and "epsilon" in metadata
    assert metadata["contact_barrier"] == 0.4  # the teacher variant travels with the data
    assert main(["train", "--data", str(data_file), "--out", str(tmp_path / "b"), *common,
                 "--select-every", "1", "--select-steps", "20", "--select-replicas", "2",
                 "--energy-weight", "0.5", "--dihedral-degree", "1", "--grad-clip", "1000",
                 "--weight-average", "0.5"]) == 0
    model = load_potential(tmp_path / "b" / "cln025.pt")
    assert model.schnet.config.hidden == 8 and model.priors["dihedrals"].k1s.shape[1] == 1
    card = json.loads((tmp_path / "b" / "cln025.json").read_text())
    # one harmonic: one minimum per dihedral, at none of them far from native
    assert card["priors"]["dihedral_degree"] == 1
    assert card["priors"]["dihedrals_with_a_non_native_minimum"] == 0
    assert "refinement" not in card["priors"]
    # a series of no harmonic is refused before any data or folder is made
    assert main(["train", "--data", str(data_file), "--dihedral-degree", "0", "--out",
                 str(tmp_path / "none"), *common]) == 2
    assert not (tmp_path / "none").exists()
    selection = card["training"]["selection_in_md"]
    assert selection["steps"] == 20 and selection["replicas"] == 2
    assert [row["epoch"] for row in selection["scores"]] == [1]
    assert card["training"]["energy_weight"] == 0.5
    assert card["training"]["grad_clip"] == 1000.0 and card["training"]["clipped_steps"] == 0
    assert card["training"]["weight_average"] == 0.5
    assert "val force RMSE" in capsys.readouterr().out
    for option, value, message in (
        ("--grad-clip", "-1", "--grad-clip must be a finite norm >= 0"),
        ("--weight-average", "1", r"--weight-average must lie in [0, 1)"),
    ):
        assert main(["train", "--data", str(data_file), option, value, "--out",
                     str(tmp_path / "none"), *common]) == 2
        assert message in capsys.readouterr().err and not (tmp_path / "none").exists()
    # a spent wall limit: one batch is trained and the model is still saved
    common[common.index("--epochs") + 1] = "50"
    assert main(["train", "--data", str(data_file), "--wall-limit", "0", "--out",
                 str(tmp_path / "c"), "--refine-priors", *common]) == 0
    card = json.loads((tmp_path / "c" / "cln025.json").read_text())
    assert card["training"]["stopped_by_time_limit"] and card["training"]["epochs_run"] == 1
    # the inverted bonded terms refitted to the teacher's forces leave SchNet less to learn
    refinement = card["priors"]["refinement"]
    assert refinement["terms"] == ["bonds", "angles", "dihedrals"] and refinement["frames"] == 8
    assert (refinement["residual_force_rms_refined"]
            < refinement["residual_force_rms_boltzmann"])
    assert "refined by force matching" in card["priors"]["method"]
    assert "bonded terms refined by force matching" in card["model"]
    assert "training ends 0 s from now (wall limit)" in capsys.readouterr().out


def test_cli_validate_writes_the_validation_into_the_card(tmp_path, capsys):
    sys = tiny_system()
    model = tmp_path / "cln025.pt"
    potential = Potential(sys.bead_types, small_schnet(**TINY), {})
    potential.metadata = {"protein": "cln025", "teacher": {"epsilon": 0.3}}
    save_potential(potential, model)
    long_run = {"passes": {"q_intersection": True}, "time_ps": 2000.0}
    (tmp_path / "cln025.json").write_text(json.dumps(
        {"validation": {"force_rmse": 1.5, "long_run": long_run, "results": [{}]}}))
    assert main(["validate", "--model", str(model), "--temperatures", "300,400",
                 "--replicas", "2", "--steps", "20", "--device", "cpu"]) == 0
    validation = json.loads((tmp_path / "cln025.json").read_text())["validation"]
    assert validation["temperatures"] == [300.0, 400.0] and validation["force_rmse"] == 1.5
    assert validation["long_run"] == long_run  # short runs replace short runs only
    assert len(validation["results"]) == 2 and (tmp_path / "cln025.validation.pt").is_file()
    assert "Q overlap" in capsys.readouterr().out
    bare = tmp_path / "bare.pt"
    potential.metadata = {"protein": "cln025"}
    save_potential(potential, bare)
    assert main(["validate", "--model", str(bare), "--device", "cpu"]) == 2
    assert "no teacher in its metadata" in capsys.readouterr().err


def test_saved_data_round_trip(data, tmp_path):
    save_teacher_data(data, tmp_path / "d.pt", {"epsilon": 0.3})
    loaded, metadata = load_teacher_data(tmp_path / "d.pt")
    assert metadata == {"epsilon": 0.3}
    assert all(torch.equal(loaded[k], data[k]) for k in data)


def test_a_per_bead_embedding_gives_every_bead_its_own_vector(data, tmp_path):
    sys = tiny_system()
    fit = FitSettings(epochs=1, batch_size=20)
    settings = TrainSettings(schnet=small_config(**TINY), fit=fit, progress=False,
                             embedding="bead")
    model, card = train_potential(sys, teacher_potential(sys), data, settings, tmp_path)
    assert card["schnet"]["embedding"] == "bead"
    assert card["schnet"]["embedding_size"] == sys.n_beads
    loaded = load_potential(tmp_path / "cln025.pt")
    assert torch.equal(loaded.bead_types, torch.arange(sys.n_beads))
    # beads of one type (the mapping's) now start from different vectors
    same = (sys.bead_types == sys.bead_types[1]).nonzero().flatten()
    vectors = loaded.schnet.embedding_layer(loaded.bead_types[same])
    assert len(same) > 1 and not torch.allclose(vectors[0], vectors[1])
    # continued, it keeps its embedding; another one given is refused
    more = TrainSettings(schnet=small_config(), fit=fit, progress=False,
                         start_from=str(tmp_path / "cln025.pt"))
    (tmp_path / "more").mkdir()
    _, card = train_potential(sys, teacher_potential(sys), data, more, tmp_path / "more")
    assert card["schnet"]["embedding"] == "bead"
    other = TrainSettings(schnet=small_config(), fit=fit, progress=False,
                          start_from=str(tmp_path / "cln025.pt"), embedding="type")
    with pytest.raises(ValueError, match="has a per-bead embedding"):
        train_potential(sys, teacher_potential(sys), data, other, tmp_path / "other")
    with pytest.raises(ValueError, match="embedding must be one of"):
        train_potential(sys, teacher_potential(sys), data,
                        TrainSettings(fit=fit, progress=False, embedding="atom"), tmp_path / "x")


def test_edge_walls_lie_below_the_teacher_frames_of_every_temperature(tmp_path):
    sys = tiny_system()
    teacher = teacher_potential(sys)
    data = generate_teacher_data(sys, teacher, [300.0, 600.0], 4, 200, 10, seed=0)
    fit = FitSettings(epochs=1, batch_size=20)

    def walls(form):
        settings = TrainSettings(schnet=small_config(**TINY), fit=fit, progress=False,
                                 prior_repulsion=form)
        (tmp_path / form).mkdir()
        model, card = train_potential(sys, teacher, data, settings, tmp_path / form)
        return model.priors["repulsion"].term_energies(data["positions"]), card["priors"]

    edge, card = walls("edge")
    # fitted on the 300-K and the 600-K frames alike: nothing on any frame trained on
    assert card["repulsion_temperatures_K"] == [300.0, 600.0]
    assert float(edge.abs().max()) < 1e-5
    # the other forms keep their σ from the prior temperature's frames alone
    assert walls("cutoff")[1]["repulsion_temperatures_K"] == [300.0]


# -- the moving average of the weights (WeightAverage): its update rule, the block that
# lends the averaged weights, and force matching that validates and keeps them
def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_update_follows_the_rule_and_the_block_lends_the_average():
    module = torch.nn.Linear(3, 2)
    start = _state(module)
    average = WeightAverage(module, 0.75)
    with torch.no_grad():
        module.weight.add_(4.0)
    average.update(module)
    torch.testing.assert_close(average.shadow["weight"], start["weight"] + 1.0)  # 0.25 × 4
    moved = _state(module)
    with average.applied(module):
        torch.testing.assert_close(module.weight, start["weight"] + 1.0)
    torch.testing.assert_close(module.weight, moved["weight"])
    with pytest.raises(RuntimeError, match="inside"), average.applied(module):
        raise RuntimeError("inside")
    torch.testing.assert_close(module.weight, moved["weight"])  # restored after an error
    with pytest.raises(ValueError, match=r"decay must lie in \[0, 1\)"):
        WeightAverage(module, 1.0)


@pytest.fixture(scope="module")
def frames():
    sys = tiny_system()
    data = generate_teacher_data(sys, teacher_potential(sys), [300.0], 2, 80, 10, seed=0)
    return data["positions"], data["forces"]


def _fit(frames, monkeypatch=None, online=None, **options):
    """Two epochs of 4 steps; with ``monkeypatch``, the raw weights after every step."""
    steps = []
    if monkeypatch is not None:
        step = torch.optim.Adam.step

        def recording(self, *args, **kwargs):
            out = step(self, *args, **kwargs)
            steps.append(_state(schnet))
            return out

        monkeypatch.setattr(torch.optim.Adam, "step", recording)
    schnet = small_schnet(0, **TINY)
    settings = FitSettings(epochs=2, batch_size=4, learning_rate=1e-2, patience=10,
                           **options)
    result = train_force_matching(schnet, tiny_system().bead_types, frames, frames, settings,
                                  progress=False, online=online)
    return schnet, result, steps


def _average_along(steps: list[dict], decay: float) -> dict[str, torch.Tensor]:
    expected = _state(small_schnet(0, **TINY))
    for state in steps:
        for name, value in expected.items():
            if value.is_floating_point():
                value.lerp_(state[name], 1.0 - decay)
    return expected


def test_training_keeps_and_validates_the_averaged_weights(frames, monkeypatch):
    raw, raw_result, steps = _fit(frames, monkeypatch)
    monkeypatch.undo()
    assert len(steps) == 8
    averaged, result, _ = _fit(frames, weight_average=0.8)
    # the optimiser's own path is the same; the kept weights are the average along it,
    # taken at the best epoch's end
    expected = _average_along(steps[: 4 * result.best_epoch], 0.8)
    for name, value in averaged.state_dict().items():
        torch.testing.assert_close(value, expected[name])
    assert result.history[0]["val_force_rmse"] != raw_result.history[0]["val_force_rmse"]
    # decay 0: the average is the latest weights, the run the plain one
    plain, plain_result, _ = _fit(frames, weight_average=0.0)
    latest, latest_result, _ = _fit(frames, weight_average=1e-12)
    for name, value in plain.state_dict().items():
        torch.testing.assert_close(latest.state_dict()[name], value)
    assert [row["val_force_rmse"] for row in latest_result.history] == pytest.approx(
        [row["val_force_rmse"] for row in plain_result.history], rel=1e-5)


def test_with_walkers_the_last_average_is_kept(frames, monkeypatch):
    sys = tiny_system()

    def walkers():
        settings = OnlineSettings(walkers=2, refresh_every=3, steps=20, save_every=10)
        return OnlineEnsemble(sys, sys.bead_types, teacher_potential(sys).priors,
                              frames[0][:4], settings)

    _, _, steps = _fit(frames, monkeypatch, walkers(), ensemble_weight=1.0)
    monkeypatch.undo()
    averaged, result, _ = _fit(frames, online=walkers(), ensemble_weight=1.0,
                               weight_average=0.5)
    assert result.best_epoch == 2
    expected = _average_along(steps, 0.5)
    for name, value in averaged.state_dict().items():
        torch.testing.assert_close(value, expected[name])


def test_sampler_frames_refuse_the_average(frames):
    positions = frames[0][:4]
    zeros = torch.zeros(4)
    sets = [EnsembleSet(positions, zeros, positions, zeros, 300.0)]
    with pytest.raises(ValueError, match="weight averaging goes with walkers"):
        train_force_matching(
            small_schnet(0, **TINY), tiny_system().bead_types, frames, frames,
            FitSettings(epochs=1, ensemble_weight=1.0, weight_average=0.5), progress=False,
            ensemble=(sets, sets),
        )
