"""``workbench train`` for every registered architecture: a tiny CGPaiNN, CGEGNN,
CGTensorProduct and CGDeepPotential trained by force matching, saved with their
architecture, recorded in the card; ``--arch`` and the network's sizes on the command line
and in a recipe."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from helpers import tiny_system

from workbench.cli import main
from workbench.model.architectures import build_network
from workbench.model.deep_potential import DeepPotentialConfig, structure_sel
from workbench.model.dp_statistics import set_environment_statistics
from workbench.model.egnn import EGNNConfig
from workbench.model.io import load_potential
from workbench.model.painn import PaiNNConfig
from workbench.model.potential import Potential
from workbench.model.schnet import SchNetConfig
from workbench.model.tensor_product import TensorProductConfig
from workbench.teacher import teacher_potential
from workbench.training.data import generate_teacher_data, save_teacher_data, split_indices
from workbench.training.force_matching import FitSettings, potential_labels
from workbench.training.pipeline import TrainSettings, train_potential

CONFIGS = {
    "painn": PaiNNConfig(hidden=8, blocks=1, num_rbf=6, cutoff=5.0, output_widths=[8]),
    "egnn": EGNNConfig(hidden=8, edge_width=16, layers=1, num_rbf=6, cutoff=5.0,
                       output_widths=[8]),
    "nequip": TensorProductConfig(irreps="8x0e + 4x1o", lmax=1, blocks=1, num_rbf=6,
                                  radial_width=8, cutoff=5.0, output_widths=[8]),
    "dp": DeepPotentialConfig(cutoff=5.0, cutoff_smooth=3.0, embedding_widths=[4, 8],
                              axis_neurons=4, fitting_widths=[8], num_neighbors=8.0),
}
FIT = FitSettings(epochs=4, batch_size=16, learning_rate=2e-2)


@pytest.fixture(scope="module")
def data():
    sys = tiny_system()
    return generate_teacher_data(sys, teacher_potential(sys), [300.0], 4, 200, 10, seed=0)


def force_rmse(potential: Potential, data: dict) -> float:
    """RMS difference of ``potential``'s forces from the teacher's over all frames."""
    forces = potential_labels(potential, data["positions"])[1]
    return float((forces - data["forces"]).square().mean().sqrt())


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_a_network_of_any_architecture_is_trained_saved_and_carded(arch, data, tmp_path):
    if arch == "nequip":
        pytest.importorskip("e3nn")
    sys = tiny_system()
    settings = TrainSettings(network=CONFIGS[arch], fit=FIT, progress=False)
    potential, card = train_potential(sys, teacher_potential(sys), data, settings, tmp_path)
    assert potential.architecture == arch and potential.schnet is None
    # force matching lowered the force error of the untrained network it started from
    torch.manual_seed(FIT.seed)  # the pipeline's initial weights
    untrained = Potential(sys.bead_types, build_network(arch, CONFIGS[arch]),
                          dict(potential.priors))
    assert force_rmse(potential, data) < 0.95 * force_rmse(untrained, data)
    # the file loads as the same architecture, with the same energies
    loaded = load_potential(tmp_path / "cln025.pt")
    assert loaded.architecture == arch and loaded.network.config == potential.network.config
    torch.testing.assert_close(potential_labels(loaded, data["positions"][:8])[0],
                               potential_labels(potential, data["positions"][:8])[0])
    name = type(potential.network).__name__
    assert name in loaded.metadata["description"]
    # the card names the architecture and keeps its config under that name
    on_disk = json.loads((tmp_path / "cln025.json").read_text())
    assert card["architecture"] == on_disk["architecture"] == arch and "schnet" not in on_disk
    assert on_disk[arch] == {**CONFIGS[arch].to_dict(), "embedding": "type"}
    assert on_disk["model"].startswith(f"{name} + priors")


def test_a_deep_potential_with_slots_is_trained_from_deepmd_kits_input_statistics(data,
                                                                                   tmp_path):
    sys = tiny_system()
    sel = structure_sel(sys.native_positions, sys.bead_types, 5.0, 25, headroom=2.0)
    config = replace(CONFIGS["dp"], sel=sel, num_neighbors=float(sum(sel)))
    settings = TrainSettings(network=config, fit=replace(FIT, epochs=1), progress=False)
    potential, card = train_potential(sys, teacher_potential(sys), data, settings, tmp_path)
    record = card["dp"]["environment_statistics"]
    present = sorted(set(sys.bead_types.tolist()))
    assert record["types"] == present
    # the statistics of the training frames (all of them here: fewer than the most taken)
    train, _ = split_indices(data["positions"].shape[0], settings.validation_fraction,
                             FIT.seed)
    assert record["frames"] == train.numel()
    untrained = build_network("dp", config)
    set_environment_statistics(untrained, data["positions"][train], sys.bead_types)
    network = potential.network
    torch.testing.assert_close(network.env_mean, untrained.env_mean, rtol=0, atol=0)
    assert float(network.env_mean[present, 0].min()) > 0.0
    assert record["mean_s"] == [round(float(network.env_mean[t, 0]), 6) for t in present]


def test_a_continued_model_keeps_its_architecture(data, tmp_path):
    sys = tiny_system()
    first = TrainSettings(network=CONFIGS["painn"], fit=replace(FIT, epochs=1), progress=False)
    model, _ = train_potential(sys, teacher_potential(sys), data, first, tmp_path)
    start = str(tmp_path / "cln025.pt")
    more = TrainSettings(fit=FitSettings(epochs=1, batch_size=16, learning_rate=0.0),
                         progress=False, start_from=start)
    (tmp_path / "more").mkdir()
    resumed, card = train_potential(sys, teacher_potential(sys), data, more, tmp_path / "more")
    assert resumed.architecture == card["architecture"] == "painn"
    for (key, a), b in zip(model.state_dict().items(), resumed.state_dict().values(),
                           strict=True):
        assert torch.equal(a, b), key
    other = TrainSettings(network=SchNetConfig(), fit=FIT, progress=False, start_from=start)
    with pytest.raises(ValueError, match="holds a painn network.*not 'schnet'"):
        train_potential(sys, teacher_potential(sys), data, other, tmp_path / "x")


def test_cli_trains_the_architecture_given_with_its_sizes(data, tmp_path, capsys):
    sys = tiny_system()
    data_file = tmp_path / "teacher.pt"
    save_teacher_data(data, data_file, teacher_potential(sys).metadata)
    recipe = tmp_path / "egnn.yaml"
    recipe.write_text("arch: egnn\nnetwork:\n  hidden: 8\n  edge_width: 16\n  layers: 1\n"
                      "  output_widths: [8]\n")
    common = ["--data", str(data_file), "--epochs", "1", "--batch-size", "16",
              "--device", "cpu", "--quiet"]
    # the size flags set the keys of the same name over the recipe's mapping
    # selection and validation runs in MD take the network as it is
    assert main(["train", "--config", str(recipe), "--num-rbf", "6", "--cutoff", "5",
                 "--select-every", "1", "--select-steps", "20", "--select-replicas", "2",
                 "--validate-steps", "20", "--validate-replicas", "2",
                 "--out", str(tmp_path / "egnn"), *common]) == 0
    model = load_potential(tmp_path / "egnn" / "cln025.pt")
    assert model.architecture == "egnn"
    assert model.network.config == EGNNConfig(hidden=8, edge_width=16, layers=1, num_rbf=6,
                                              cutoff=5.0, output_widths=[8])
    card = json.loads((tmp_path / "egnn" / "cln025.json").read_text())
    assert card["architecture"] == "egnn" and card["egnn"]["layers"] == 1
    assert card["training"]["selection_in_md"]["scores"][0]["epoch"] == 1
    assert card["validation"]["force_rmse"] > 0
    assert "egnn" in capsys.readouterr().out
    # a size the architecture lacks, or an unknown key of the mapping, is refused by name
    for extra, message in (
        (["--arch", "painn", "--filters", "8"], "--filters is not a size of painn"),
        (["--arch", "painn", "--network", "{width: 8}"],
         "--network: unknown PaiNN config keys: ['width']"),
    ):
        assert main(["train", *extra, "--out", str(tmp_path / "none"), *common]) == 2
        assert message in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_cli_trains_a_deep_potential(data, tmp_path, capsys):
    sys = tiny_system()
    data_file = tmp_path / "teacher.pt"
    save_teacher_data(data, data_file, teacher_potential(sys).metadata)
    common = ["--data", str(data_file), "--epochs", "1", "--batch-size", "16",
              "--device", "cpu", "--quiet", "--validate-steps", "10",
              "--validate-replicas", "2"]
    sizes = ("{cutoff_smooth: 3.0, embedding_widths: [4, 8], axis_neurons: 4, "
             "fitting_widths: [8], type_one_side: true}")
    assert main(["train", "--arch", "dp", "--network", sizes, "--cutoff", "5",
                 "--out", str(tmp_path / "dp"), *common]) == 0
    model = load_potential(tmp_path / "dp" / "cln025.pt")
    assert model.architecture == "dp" and model.network.config == DeepPotentialConfig(
        cutoff=5.0, cutoff_smooth=3.0, embedding_widths=[4, 8], axis_neurons=4,
        fitting_widths=[8], type_one_side=True)
    card = json.loads((tmp_path / "dp" / "cln025.json").read_text())
    assert card["architecture"] == "dp" and card["dp"]["type_one_side"] is True
    out = capsys.readouterr().out
    assert any(line.replace(" ", "") == "network|dp" for line in out.splitlines())
    assert main(["train", "--arch", "dp", "--hidden", "8", "--out", str(tmp_path / "none"),
                 *common]) == 2
    assert "--hidden is not a size of dp" in capsys.readouterr().err


def test_an_unknown_architecture_is_refused_listing_the_choices(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--generate", "--arch", "unknown", "--out", str(tmp_path / "o")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--arch: invalid choice: 'unknown'" in err
    assert all(name in err for name in ("schnet", "painn", "egnn"))
    assert not (tmp_path / "o").exists()
