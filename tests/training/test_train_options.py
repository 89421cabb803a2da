"""Training options that constrain one another refuse themselves, naming the field; the
network's architecture and sizes."""

import pytest

from workbench.model.egnn import EGNNConfig
from workbench.model.painn import PaiNNConfig
from workbench.model.schnet import SchNetConfig
from workbench.settings_error import SettingsError
from workbench.training.train_options import TrainOptions


def test_defaults_and_lists():
    options = TrainOptions(cold="200, 250", compact="0.7,0.8", noise="0.1")
    assert options.cold_temperatures == (200.0, 250.0)
    assert options.compact_fractions == (0.7, 0.8) and options.noise_scales == (0.1,)
    assert TrainOptions().noise_scales is None


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"sampler_start": "run"}, "sampler_start", "add {sampler}"),
        ({"teacher_start": "run", "data": "d.pt"}, "teacher_start", "with {generate}"),
        ({"select_start": "run"}, "select_start", "add {select_every}"),
        ({"ensemble_weight": 0.1}, "ensemble_weight", "{sampler} or {online_walkers}"),
        ({"online_walkers": 2}, "online_walkers", "add {ensemble_weight}"),
        ({"online_start": "run"}, "online_start", "add {online_walkers}"),
        ({"reweighting_backoffs": -1}, "reweighting_backoffs", "must be >= 0"),
        ({"reweighting_backoffs": 2}, "reweighting_backoffs", "with {sampler} and"),
        ({"reweighting_backoffs": 2, "sampler": "m.pt", "ensemble_weight": 0.1,
          "online_walkers": 4}, "reweighting_backoffs", "without {online_walkers}"),
        ({"sampler_equilibration": -1}, "sampler_equilibration", "must be >= 0"),
        ({"sampler_max_force": 0.0}, "sampler_max_force", "must be positive"),
        ({"grad_clip": float("inf")}, "grad_clip", "finite norm"),
        ({"weight_average": 1.0}, "weight_average", "[0, 1)"),
        ({"weight_average": 0.9, "ensemble_weight": 0.1, "sampler": "m.pt"}, "weight_average",
         "goes with {online_walkers}"),
        ({"dihedral_degree": 0}, "dihedral_degree", "at least 1"),
        ({"cold": "0,250"}, "cold", "must be positive"),
        ({"compact": "1.2"}, "compact", "(0, 1]"),
        ({"noise": "0.1,x"}, "noise", "comma list of numbers"),
        ({"noise_fraction": 0.0}, "noise_fraction", "(0, 1]"),
    ],
)
def test_contradictions_name_the_field(changes, field, message):
    with pytest.raises(SettingsError) as error:
        TrainOptions(**changes)
    assert error.value.field == field and message in error.value.message


def test_the_network_config_of_each_architecture():
    assert TrainOptions().network_config == SchNetConfig()  # the command's former defaults
    options = TrainOptions(arch="painn", network="{hidden: 32, output_widths: [16]}",
                           blocks=2, cutoff=8.0)
    assert options.network_config == PaiNNConfig(hidden=32, output_widths=[16], blocks=2,
                                                 cutoff=8.0)
    # a size option overrides the same key of the mapping
    assert TrainOptions(arch="egnn", network='{"hidden": 32}', hidden=16).network_config == (
        EGNNConfig(hidden=16))


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"arch": "network"}, "arch", "must be one of dp, egnn, nequip, painn, schnet"),
        ({"arch": "egnn", "blocks": 2}, "blocks", "is not a size of egnn"),
        ({"arch": "painn", "filters": 8}, "filters", "give them with {network}"),
        ({"network": "[1, 2]"}, "network", "must be a mapping of schnet's config keys"),
        ({"network": "{hidden: [}"}, "network", "must be a mapping"),
        ({"arch": "egnn", "network": "{blocks: 2}"}, "network",
         "unknown EGNN config keys: ['blocks'] (the egnn config keys: embedding_size"),
    ],
)
def test_network_options_that_do_not_fit_the_architecture_name_the_field(changes, field,
                                                                          message):
    with pytest.raises(SettingsError) as error:
        TrainOptions(**changes)
    assert error.value.field == field and message in error.value.message
