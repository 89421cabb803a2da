"""Energy scales fitted to the teacher's ensemble: scaling, the Newton step, the fit, the CLI."""

import json
import math

import pytest
import torch
from helpers import schnet_potential, system

from workbench.model.architectures import build_network
from workbench.model.potential import Potential
from workbench.neighbors import NeighborList
from workbench.teacher import teacher_potential
from workbench.training import energy_scales
from workbench.training.energy_scales import (
    Sample,
    fit_energy_scales,
    newton_step,
    sample_frames,
    scalable_terms,
    scale_terms,
    term_energies,
)
from workbench.units import KB


def frames(sys, count: int = 6, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    native = sys.native_positions.float()
    return native + 0.3 * torch.randn(count, *native.shape, generator=generator)


def all_terms(potential, pos):
    graph = None
    if potential.schnet is not None:
        graph = NeighborList(pos.shape[1], potential.cutoff, skin=0.0).update(pos)
    with torch.no_grad():
        return potential.energy_terms(pos, graph)


def test_scaling_multiplies_that_term_and_leaves_the_model_alone():
    sys = system("cln025")
    model = schnet_potential(sys)
    pos = frames(sys)
    before = all_terms(model, pos)
    names = scalable_terms(model)
    # all but the (σ/r)⁶ repulsion, whose energy is not linear in a parameter
    assert names == ["schnet", "bonds", "angles", "dihedrals", "contacts"]
    assert "repulsion" in before
    for name in names:
        scaled = scale_terms(model, {name: 0.7})
        after = all_terms(scaled, pos)
        for key, value in before.items():
            factor = 0.7 if key == name else 1.0
            torch.testing.assert_close(after[key], factor * value, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(all_terms(model, pos)["schnet"], before["schnet"])


@pytest.mark.parametrize(
    ("arch", "config"),
    [("painn", {"hidden": 8, "blocks": 1, "num_rbf": 6, "cutoff": 5.0}),
     ("egnn", {"hidden": 8, "edge_width": 16, "layers": 1, "num_rbf": 6, "cutoff": 5.0})],
)
def test_the_network_term_of_any_architecture_is_scaled_by_its_name(arch, config):
    sys = system("cln025")
    torch.manual_seed(0)
    model = Potential(sys.bead_types, build_network(arch, config))
    pos = frames(sys)
    assert scalable_terms(model) == [arch]
    before = term_energies(model, pos, [arch])
    torch.testing.assert_close(term_energies(scale_terms(model, {arch: 0.7}), pos, [arch]),
                               0.7 * before, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    ("scales", "message"),
    [({"repulsion": 0.9}, "cannot be scaled"), ({"nothing": 1.0}, "cannot be scaled"),
     ({"schnet": 0.0}, "positive and finite"), ({"schnet": math.nan}, "positive and finite")],
)
def test_scaling_refuses_what_it_cannot_do(scales, message):
    with pytest.raises(ValueError, match=message):
        scale_terms(schnet_potential(system("cln025")), scales)


def test_term_energies_batch_like_one_evaluation(monkeypatch):
    sys = system("cln025")
    model = schnet_potential(sys)
    pos = frames(sys, count=5)
    whole = term_energies(model, pos, ["schnet", "angles"])
    monkeypatch.setattr(energy_scales, "LABEL_BEADS_PER_BATCH", 2 * pos.shape[1])
    torch.testing.assert_close(term_energies(model, pos, ["schnet", "angles"]), whole)
    assert whole.shape == (5, 2) and whole.dtype == torch.float64
    torch.testing.assert_close(whole[:, 1], all_terms(model, pos)["angles"].double())


def test_newton_step_solves_the_quadratic_model_and_is_capped():
    temperature = 300.0
    beta = 1.0 / (KB * temperature)
    generator = torch.Generator().manual_seed(1)
    model = torch.randn(4000, 2, generator=generator, dtype=torch.float64)
    model = model @ torch.tensor([[2.0, 0.5], [0.0, 1.0]], dtype=torch.float64)
    teacher = model[:100] + torch.tensor([0.3, -0.2], dtype=torch.float64)
    step, gradient = newton_step(teacher, model, temperature, max_step=10.0)
    expected_gradient = beta * (teacher.mean(0) - model.mean(0))
    torch.testing.assert_close(gradient, expected_gradient)
    hessian = beta**2 * torch.cov(model.T)
    torch.testing.assert_close(hessian @ step, -gradient, rtol=1e-4, atol=1e-8)
    capped, _ = newton_step(teacher, model, temperature, max_step=0.01)
    assert capped.norm() == pytest.approx(0.01)
    torch.testing.assert_close(capped / capped.norm(), step / step.norm())
    # a model whose terms average what the teacher's do needs no change
    zero, _ = newton_step(model, model, temperature, max_step=1.0)
    assert zero.abs().max() < 1e-9


def test_sample_frames_keeps_the_live_replicas_after_the_discarded_start():
    sys = system("cln025")
    starts = sys.native_positions.float()[None].repeat(3, 1, 1)
    sample = sample_frames(sys, teacher_potential(sys), starts, 300.0, steps=60, discard=20,
                           every=10, seed=3)
    assert sample.positions.shape == (3 * 4, *starts.shape[1:])
    assert sample.q.shape == (12,) and sample.frozen == 0 and sample.live.all()
    torch.testing.assert_close(sample.ends, sample.positions.reshape(3, 4, -1, 3)[:, -1])
    with pytest.raises(ValueError, match="discard < steps"):
        sample_frames(sys, teacher_potential(sys), starts, 300.0, steps=20, discard=20, every=5)


def test_fit_recovers_a_known_scale_of_the_contact_wells():
    """A teacher whose contact wells are made 1.5 times deeper is brought back: the fitted
    scale of its wells comes out near 1/1.5 and the contact energy's mean near the
    teacher's."""
    torch.manual_seed(0)
    sys = system("cln025")
    teacher = teacher_potential(sys)
    starts = sys.native_positions.float()[None].repeat(8, 1, 1)
    reference = sample_frames(sys, teacher, starts, 300.0, 2500, 500, 50, seed=1)
    deep = scale_terms(teacher, {"contacts": 1.5})
    fit = fit_energy_scales(sys, deep, reference, starts, ["contacts"], 300.0, iterations=3,
                            steps=2500, discard=500, every=50, max_step=0.5, seed=2)
    first, last = fit.history[0], fit.history[-1]
    assert first["scales"] == {"contacts": 1.0} and len(fit.history) == 3
    assert fit.scales["contacts"] == pytest.approx(1 / 1.5, rel=0.12)
    gap = [abs(row["teacher_means"]["contacts"] - row["model_means"]["contacts"])
           for row in (first, last)]
    assert gap[1] < 0.5 * gap[0]
    assert last["q_intersection"] > first["q_intersection"]
    torch.testing.assert_close(fit.potential.priors["contacts"].epsilon,
                               deep.priors["contacts"].epsilon * fit.scales["contacts"])
    assert deep.priors["contacts"].epsilon[0] == pytest.approx(1.5 * teacher.metadata["epsilon"])


def fake_sample(starts: torch.Tensor, live: torch.Tensor, shift: float) -> Sample:
    """Frames of a fake run: every replica moved by ``shift``; a Q per frame."""
    ends = starts + shift
    return Sample(ends[live], torch.full((int(live.sum()),), 0.9), ends, live)


def test_chains_persist_and_a_stopped_replica_restarts_where_it_began(monkeypatch):
    sys = system("cln025")
    model = teacher_potential(sys)
    starts = sys.native_positions.float()[None].repeat(3, 1, 1)
    seen = []
    live = torch.tensor([True, False, True])

    def fake(system_, potential, begin, *args, **kwargs):
        seen.append(begin.clone())
        return fake_sample(begin, live, 1.0)

    monkeypatch.setattr(energy_scales, "sample_frames", fake)
    teacher = fake_sample(starts, torch.ones(3, dtype=torch.bool), 0.0)
    fit_energy_scales(sys, model, teacher, starts, ["contacts"], 300.0, 3, 10, 0, 5)
    torch.testing.assert_close(seen[1][live], seen[0][live] + 1.0)
    torch.testing.assert_close(seen[1][~live], starts[~live])
    torch.testing.assert_close(seen[2][live], starts[live] + 2.0)
    seen.clear()
    fit_energy_scales(sys, model, teacher, starts, ["contacts"], 300.0, 2, 10, 0, 5,
                      persistent=False)
    torch.testing.assert_close(seen[1], starts)


def test_an_interrupt_keeps_the_last_finished_iteration(monkeypatch):
    sys = system("cln025")
    model = teacher_potential(sys)
    starts = sys.native_positions.float()[None].repeat(2, 1, 1)
    calls = []

    def fake(system_, potential, begin, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return fake_sample(begin, torch.ones(2, dtype=torch.bool), 0.1)

    monkeypatch.setattr(energy_scales, "sample_frames", fake)
    teacher = fake_sample(starts, torch.ones(2, dtype=torch.bool), 0.0)
    fit = fit_energy_scales(sys, model, teacher, starts, ["contacts"], 300.0, 4, 10, 0, 5)
    assert fit.interrupted and len(fit.history) == 1 and fit.scales == {"contacts": 1.0}
    calls.clear()
    calls.append(1)  # the next call is the "second": an interrupt in the first iteration
    with pytest.raises(KeyboardInterrupt):
        fit_energy_scales(sys, model, teacher, starts, ["contacts"], 300.0, 4, 10, 0, 5)


def test_cli_writes_a_scaled_model_with_its_record(tmp_path, capsys):
    from workbench.cli import main
    from workbench.model.io import load_potential, save_potential

    sys = system("cln025")
    model_path = tmp_path / "cln025.pt"
    potential = schnet_potential(sys)
    potential.metadata = {"protein": "cln025", "teacher": {"epsilon": 0.1041}}
    save_potential(potential, model_path)
    (tmp_path / "cln025.json").write_text(json.dumps({"training": {"epochs_run": 3},
                                                      "validation": {"long_run": {}}}))
    teacher_run = tmp_path / "teacher"
    assert main(["run", "--protein", "cln025", "--model", "teacher", "--replicas", "2",
                 "--steps", "40", "--save-interval", "20", "--no-trajectory", "--quiet",
                 "--device", "cpu", "--out", str(teacher_run)]) == 0
    out = tmp_path / "scaled.pt"
    args = ["fit-scales", "--model", str(model_path), "--teacher-start", str(teacher_run),
            "--terms", "schnet,angles", "--iterations", "2", "--time", "0.2", "--discard",
            "0.04", "--every", "0.04", "--device", "cpu", "--out", str(out)]
    assert main(args) == 0
    assert "iteration 1: scales schnet" in capsys.readouterr().out
    card = json.loads((tmp_path / "scaled.json").read_text())
    record = card["energy_scales"]
    assert card["training"] == {"epochs_run": 3} and "validation" not in card
    assert len(record["history"]) == 2 and record["replicas"] == 2
    assert record["teacher_frames"] == 2 * 4 and not record["interrupted"]
    scaled = load_potential(out)
    assert scaled.metadata["energy_scales"] == pytest.approx(record["scales"])
    pos = frames(sys, count=2)
    torch.testing.assert_close(
        all_terms(scaled, pos)["schnet"],
        record["scales"]["schnet"] * all_terms(potential, pos)["schnet"], rtol=1e-5, atol=1e-4,
    )
    torch.testing.assert_close(all_terms(load_potential(model_path), pos)["schnet"],
                               all_terms(potential, pos)["schnet"])
    # refused: an existing output, the input as output, a term that cannot be scaled
    assert main(args) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert main([*args[:-1], str(model_path), "--overwrite"]) == 2
    assert "--out must differ from --model" in capsys.readouterr().err
    assert main([*args, "--overwrite", "--terms", "repulsion"]) == 2
    assert "'repulsion' cannot be scaled" in capsys.readouterr().err


def test_sigterm_ends_the_cli_fit_with_the_last_finished_iteration(tmp_path, monkeypatch,
                                                                   capsys):
    """A scheduler's time limit (SIGTERM) in the second iteration: the scaled model of the
    first is written and its record says the fit was interrupted."""
    import os
    import signal

    from workbench.cli import main
    from workbench.model.io import load_potential, save_potential

    sys = system("cln025")
    model_path = tmp_path / "cln025.pt"
    potential = schnet_potential(sys)
    potential.metadata = {"protein": "cln025", "teacher": {"epsilon": 0.1041}}
    save_potential(potential, model_path)
    teacher_run = tmp_path / "teacher"
    assert main(["run", "--protein", "cln025", "--model", "teacher", "--replicas", "2",
                 "--steps", "20", "--save-interval", "20", "--no-trajectory", "--quiet",
                 "--device", "cpu", "--out", str(teacher_run)]) == 0
    calls = []

    def fake(system_, potential_, begin, *args, **kwargs):
        calls.append(1)  # the teacher's sample, then one per iteration
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return fake_sample(begin, torch.ones(begin.shape[0], dtype=torch.bool), 0.1)

    monkeypatch.setattr(energy_scales, "sample_frames", fake)
    out = tmp_path / "scaled.pt"
    handler = signal.getsignal(signal.SIGTERM)
    assert main(["fit-scales", "--model", str(model_path), "--teacher-start", str(teacher_run),
                 "--terms", "schnet", "--iterations", "4", "--device", "cpu",
                 "--out", str(out)]) == 0
    assert "interrupted: the scales of iteration 0" in capsys.readouterr().out
    record = json.loads((tmp_path / "scaled.json").read_text())["energy_scales"]
    assert record["interrupted"] and len(record["history"]) == 1
    assert load_potential(out).metadata["energy_scales"] == {"schnet": 1.0}
    assert signal.getsignal(signal.SIGTERM) is handler  # the process's own handler is back
