"""Import of mlcg / flashmd checkpoints (workbench.model.mlcg_import).

Pickles are built with ``torch.save(..., pickle_protocol=2)`` from the stand-ins of
``tests/mlcg_standins`` (registered under the published class paths only while
being saved) and read back with the stand-in modules gone. Converted energies and
forces must match the stand-ins' direct float64 evaluation within 1e-5 relative.
"""

from __future__ import annotations

import io
import os
import pickle
import sys

import numpy as np
import pytest
import torch
from mlcg_standins import builders, install_standins, reference
from torch import nn

from workbench.md import LangevinIntegrator, Simulation
from workbench.model import load_potential, save_potential
from workbench.model.mlcg_import import MlcgImportError, import_mlcg, load_for_run
from workbench.model.priors import (
    ConstantEnergy,
    ExpRepulsion,
    FourierDihedrals,
    HarmonicBonds,
    HarmonicImpropers,
    Repulsion,
)
from workbench.model.safe_unpickle import (
    DisallowedGlobalError,
    UnsupportedModelError,
    load,
    resolve_global,
)
from workbench.neighbors import NeighborList
from workbench.system import build_system

RTOL = 1e-5


def save(obj, path):
    torch.save(obj, path, pickle_protocol=2)
    return path


def evaluate(potential, positions):
    """Our energies (C,) and forces (C, n, 3) for replicas = configurations."""
    graph = None
    if potential.network is not None:
        graph = NeighborList(positions.shape[1], potential.cutoff).update(positions)
    return potential.energy_and_forces(positions, graph)


def assert_matches(imported, expected):
    energy, forces = evaluate(imported.potential, imported.positions)
    ref_energy, ref_forces = expected
    assert energy.dtype == torch.float32
    torch.testing.assert_close(
        energy.double(), ref_energy, rtol=RTOL, atol=RTOL * float(ref_energy.abs().max())
    )
    torch.testing.assert_close(
        forces.double(), ref_forces, rtol=RTOL, atol=RTOL * float(ref_forces.abs().max())
    )


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """name -> (model path, structures path or None, reference energies and forces)."""
    folder = tmp_path_factory.mktemp("mlcg")
    native = build_system("cln025").native_positions
    out = {}
    with install_standins() as ns:
        gen = torch.Generator().manual_seed(1234)
        model, configs = builders.specialised_ca(ns.mlcg, gen)
        path = save((model, configs), folder / "cln_ca_specialized_model_and_config.pt")
        out["specialised"] = (path, None, reference(model, configs))

        model, priors, configs = builders.five_bead_case(ns.mlcg_old, gen, native)
        structures = save(configs, folder / "cln_configurations.pt")
        path = save(model, folder / "model_and_prior.pt")
        out["model_and_prior"] = (path, structures, reference(model, configs))
        prior_file = nn.ModuleDict({k: ns.mlcg_old.GradientsOut(p, k) for k, p in priors.items()})
        path = save(prior_file, folder / "mlcg_prior.pt")
        out["prior_file"] = (path, structures, reference(builders.sum_out(ns.mlcg_old, None,
                                                                          priors), configs))

        model, configs = builders.flashmd_ca(ns.flashmd, gen)
        path = save((model, configs), folder / "flashmd_specialized_model_and_config.pt")
        out["flashmd"] = (path, None, reference(model, configs))
    assert "mlcg" not in sys.modules and "torch_geometric" not in sys.modules
    return out


@pytest.mark.parametrize("case", ["specialised", "model_and_prior", "prior_file", "flashmd"])
def test_converted_energies_and_forces_match_standins(cases, case):
    model_path, structures_path, expected = cases[case]
    assert_matches(import_mlcg(model_path, structures_path), expected)


def test_specialised_checkpoint_structure(cases):
    imported = import_mlcg(cases["specialised"][0])
    config = imported.potential.schnet.config
    sizes = (config.embedding_size, config.hidden, config.filters, config.num_rbf)
    assert sizes == (42, 64, 32, 16)
    assert (config.blocks, config.output_widths, config.cutoff) == (3, [32, 16], 8.0)
    assert (config.basis, config.basis_envelope, config.conv_envelope) == (
        "exp-normal", "cosine", "cosine"
    )
    priors = imported.potential.priors
    assert list(priors) == ["repulsion", "dihedrals", "angles", "bonds"]
    assert isinstance(priors["repulsion"], Repulsion) and priors["repulsion"].num_terms == 28
    assert priors["dihedrals"].k1s.shape == (7, 5) and priors["bonds"].num_terms == 9
    assert imported.positions.shape == (2, 10, 3) and imported.positions.dtype == torch.float32
    assert imported.potential.metadata["max_num_neighbors"] == 200
    assert imported.potential.metadata["prior_groups"]["repulsion"] == ["non_bonded"]


def test_general_priors_are_merged_per_class(cases):
    imported = import_mlcg(*cases["model_and_prior"][:2])
    priors = imported.potential.priors
    assert list(priors) == ["bonds", "angles", "dihedrals", "repulsion"]
    assert isinstance(priors["bonds"], HarmonicBonds) and priors["bonds"].num_terms == 48
    assert priors["angles"].num_terms == 65
    assert isinstance(priors["dihedrals"], FourierDihedrals)
    assert priors["dihedrals"].num_terms == 45 and priors["dihedrals"].k1s.shape[1] == 3
    assert priors["repulsion"].num_terms == 924
    groups = imported.potential.metadata["prior_groups"]
    assert "ALA_phi" in groups["dihedrals"] and "gamma_2" in groups["dihedrals"]
    assert (priors["angles"].k == 0).any(), "a type triple outside the allowed keys gives k = 0"
    config = imported.potential.schnet.config
    assert (config.basis, config.basis_envelope, config.cutoff) == ("gaussian", "identity", 7.0)


def test_flashmd_specialised_extras(cases):
    imported = import_mlcg(cases["flashmd"][0])
    priors = imported.potential.priors
    assert isinstance(priors["exp_repulsion"], ExpRepulsion)
    assert isinstance(priors["impropers"], HarmonicImpropers)
    assert isinstance(priors["offsets"], ConstantEnergy)
    assert imported.potential.schnet.config.filter_bias
    assert imported.potential.metadata["source"] == "flashmd"


def test_prior_file_has_no_schnet(cases):
    imported = import_mlcg(*cases["prior_file"][:2])
    assert imported.potential.schnet is None
    assert imported.potential.metadata["max_num_neighbors"] is None


def test_system_from_five_bead_configuration(cases):
    imported = import_mlcg(*cases["model_and_prior"][:2])
    system, native = imported.system, build_system("cln025")
    assert system.mapping == "five-bead" and system.name == "cln"
    assert system.bead_names == native.bead_names
    assert system.residue_names == native.residue_names
    assert torch.equal(system.bead_types, native.bead_types)
    assert torch.equal(system.ca_index, native.ca_index)
    torch.testing.assert_close(system.masses, native.masses)
    assert system.bonds.shape == (48, 2) and system.angles.shape == (65, 3)
    assert system.dihedrals.shape == (45, 4)
    assert set(map(tuple, system.bonds.tolist())) == set(map(tuple, native.bonds.tolist()))
    assert torch.equal(system.native_positions, imported.positions[0])
    assert system.chain_index.tolist() == [0] * 10
    assert system.native_contacts.shape == (0, 2)
    assert torch.equal(imported.masses, system.masses)


def test_system_from_ca_configuration(cases):
    system = import_mlcg(cases["specialised"][0]).system
    assert system.mapping == "ca" and system.n_residues == 10
    assert system.sequence == "YYDPETGTWY"
    torch.testing.assert_close(system.masses, torch.full((10,), 12.0))
    assert system.bonds.shape == (9, 2) and system.dihedrals.shape == (7, 4)
    assert system.metadata["exclude_bonded"] is False


@pytest.mark.parametrize("case", ["specialised", "model_and_prior", "flashmd"])
def test_imported_model_simulates(cases, case):
    system, potential, positions = load_for_run(*cases[case][:2])
    sim = Simulation(
        system, potential, LangevinIntegrator(0.002, 1.0, 300.0),
        replicas=positions.shape[0], positions=positions, seed=3,
    )
    sim.step(10)
    assert torch.isfinite(sim.positions).all() and torch.isfinite(sim.energy).all()
    assert not sim.frozen.any()


def test_saved_imported_potential_loads_again(cases, tmp_path):
    imported = import_mlcg(cases["flashmd"][0])
    loaded = load_potential(save_potential(imported.potential, tmp_path / "flash.pt"))
    before = evaluate(imported.potential, imported.positions)
    after = evaluate(loaded, imported.positions)
    torch.testing.assert_close(after, before, rtol=0, atol=0)


def _ca_model(tmp_path, make_kwargs=None, configure=None, general_priors=False, extra=None):
    """Save a CA SumOut (SchNet, optionally general priors) and three CA configurations.

    ``make_kwargs(ns)`` gives keyword arguments of ``builders.schnet``;
    ``configure(model, ns, gen)`` edits the SchNet stand-in before saving.
    Returns the model path, the structures path and the reference.
    """
    with install_standins() as ns:
        ns, gen = ns.mlcg, torch.Generator().manual_seed(7)
        model = builders.schnet(ns, gen, **(make_kwargs(ns) if make_kwargs else {}))
        if configure is not None:
            configure(model, ns, gen)
        priors = builders.general_ca_priors(ns, gen) if general_priors else {}
        groups = {k: (k, m) for k, m in builders.ca_topology().items()}
        configs = builders.ca_configurations(ns, gen, groups, count=3, extra=extra)
        sum_out = builders.sum_out(ns, model, priors)
        path = save(sum_out, tmp_path / "model_and_prior.pt")
        structures = save(configs, tmp_path / "configurations.pt")
        return path, structures, reference(sum_out, configs)


def test_general_ca_priors_match_standins(tmp_path):
    path, structures, expected = _ca_model(tmp_path, general_priors=True)
    imported = import_mlcg(path, structures)
    assert list(imported.potential.priors) == ["bonds", "angles", "dihedrals", "repulsion"]
    assert_matches(imported, expected)


def test_lower_cutoff_silu_and_generic_biases(tmp_path):
    def configure(model, ns, gen):
        model.interaction_blocks[0].conv.lin2.register_parameter("bias", None)
        model.output_network.layers[-1] = builders.linear(gen, 8, 1, zero_bias=True)

    path, structures, expected = _ca_model(
        tmp_path,
        lambda ns: {"basis": "exp-normal", "activation": nn.SiLU,
                    "basis_cutoff": ns.CosineCutoff(1.5, 9.0)},
        configure,
    )
    imported = import_mlcg(path, structures)
    config = imported.potential.schnet.config
    assert (config.cutoff_lower, config.cutoff, config.activation) == (1.5, 9.0, "silu")
    assert len(imported.potential.priors) == 0
    assert imported.positions.shape == (3, 10, 3)
    assert_matches(imported, expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"basis": "exp-normal", "alpha": 0.3}, "alpha"),
        ({"activation": nn.ReLU}, "activation ReLU is not supported"),
        ({"conv_cutoff": nn.Identity}, "cutoff Identity is not supported"),
        ({"conv_cutoff": lambda: nn.Tanh()}, "cutoff Tanh is not supported"),
    ],
)
def test_inexpressible_schnet_is_refused(tmp_path, kwargs, message):
    path, structures, _ = _ca_model(tmp_path, lambda ns: kwargs)
    with pytest.raises(MlcgImportError, match=message):
        import_mlcg(path, structures)


def test_conv_cutoff_radius_mismatch_is_refused(tmp_path):
    def configure(model, ns, gen):
        for block in model.interaction_blocks:
            block.conv.cutoff = ns.CosineCutoff(0.0, 6.0)

    path, structures, _ = _ca_model(tmp_path, configure=configure)
    with pytest.raises(MlcgImportError, match="convolution cutoff ends at 6.0"):
        import_mlcg(path, structures)


def test_binding_neighbour_cap_warns(tmp_path):
    path, structures, _ = _ca_model(tmp_path, lambda ns: {"max_num_neighbors": 3})
    with pytest.warns(UserWarning, match="max_num_neighbors=3"):
        import_mlcg(path, structures)


# -- PaiNN --------------------------------------------------------------------------------


def _painn_case(tmp_path, make=None, general_priors=False):
    """A CA SumOut with a PaiNN stand-in (and optionally general priors), three
    configurations; returns paths and the references of the whole model and of the
    network alone. ``make(ns)`` gives keyword arguments of ``builders.painn``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    with install_standins() as ns:
        ns, gen = ns.mlcg, torch.Generator().manual_seed(17)
        network = builders.painn(ns, gen, **(make(ns) if make else {}))
        priors = builders.general_ca_priors(ns, gen) if general_priors else {}
        groups = {k: (k, m) for k, m in builders.ca_topology().items()}
        configs = builders.ca_configurations(ns, gen, groups, count=3)
        sum_out = builders.sum_out(ns, network, priors)
        path = save(sum_out, tmp_path / "painn_model_and_prior.pt")
        structures = save(configs, tmp_path / "configurations.pt")
        alone = reference(builders.sum_out(ns, network, {}), configs)
        return path, structures, reference(sum_out, configs), alone


def test_specialised_painn_checkpoint_matches_standins(tmp_path):
    with install_standins() as ns:
        gen = torch.Generator().manual_seed(4321)
        model, configs = builders.specialised_painn_ca(ns.mlcg, gen, vector_scale=2.0)
        path = save((model, configs), tmp_path / "painn_specialized_model_and_config.pt")
        expected = reference(model, configs)
        network = next(iter(model.models.values())).model
        alone = reference(builders.sum_out(ns.mlcg, network, {}), configs)
    imported = import_mlcg(path)
    potential = imported.potential
    assert potential.architecture == "painn" and potential.schnet is None
    config = potential.painn.config
    assert (config.embedding_size, config.hidden, config.num_rbf, config.blocks) == (42, 16, 10, 2)
    assert (config.cutoff, config.output_widths, config.basis) == (7.0, [12, 8], "exp-normal")
    assert list(potential.priors) == ["repulsion", "dihedrals", "angles", "bonds"]
    assert potential.metadata["max_num_neighbors"] == 10000
    assert_matches(imported, expected)
    graph = NeighborList(10, potential.cutoff).update(imported.positions)
    network_energy = potential.energy_terms(imported.positions, graph)["painn"]
    torch.testing.assert_close(network_energy.double(), alone[0], rtol=RTOL,
                               atol=RTOL * float(alone[0].abs().max()))


@pytest.mark.parametrize(
    "make",
    [lambda ns: {},
     lambda ns: {"basis": "gaussian", "basis_cutoff": ns.IdentityCutoff(0, 7.0),
                 "conv_cutoff": ns.CosineCutoff(0.0, 7.0), "activation": nn.SiLU},
     lambda ns: {"basis_cutoff": ns.CosineCutoff(1.5, 9.0), "epsilon": 1e-6}],
    ids=["exp-normal", "gaussian-silu", "lower-cutoff"],
)
def test_painn_model_and_priors_match_standins(tmp_path, make):
    path, structures, expected, _ = _painn_case(tmp_path, make, general_priors=True)
    imported = import_mlcg(path, structures)
    assert imported.potential.architecture == "painn"
    assert list(imported.potential.priors) == ["bonds", "angles", "dihedrals", "repulsion"]
    assert_matches(imported, expected)
    path, structures, _, alone = _painn_case(tmp_path / "alone", make)
    only = import_mlcg(path, structures)
    assert len(only.potential.priors) == 0
    assert_matches(only, alone)


def test_imported_painn_saves_loads_and_simulates(tmp_path):
    path, structures, _, _ = _painn_case(tmp_path, general_priors=True)
    system, potential, positions = load_for_run(path, structures)
    loaded = load_potential(save_potential(potential, tmp_path / "painn.pt"))
    assert loaded.architecture == "painn"
    torch.testing.assert_close(evaluate(loaded, positions), evaluate(potential, positions),
                               rtol=0, atol=0)
    sim = Simulation(system, potential, LangevinIntegrator(0.002, 1.0, 300.0),
                     replicas=3, positions=positions, seed=3)
    sim.step(10)
    assert torch.isfinite(sim.positions).all() and not sim.frozen.any()


@pytest.mark.parametrize(
    ("make", "message"),
    [(lambda ns: {"activation": nn.ReLU}, "activation ReLU is not supported"),
     (lambda ns: {"conv_cutoff": ns.CosineCutoff(0.0, 6.0)}, "cutoff ends at 6.0"),
     (lambda ns: {"basis_cutoff": ns.CosineCutoff(0, 7.0), "basis": "gaussian",
                  "conv_cutoff": ns.CosineCutoff(1.0, 7.0)}, "different lower cutoffs")],
    ids=["relu", "radius", "lower"],
)
def test_inexpressible_painn_is_refused(tmp_path, make, message):
    path, structures, _, _ = _painn_case(tmp_path, make)
    with pytest.raises(MlcgImportError, match=message):
        import_mlcg(path, structures)


def test_painn_with_mixed_epsilons_or_aggregation_is_refused(tmp_path):
    with install_standins() as ns:
        gen = torch.Generator().manual_seed(1)
        network = builders.painn(ns.mlcg, gen)
        network.mixing_blocks[1].epsilon = 1e-4
        groups = {k: (k, m) for k, m in builders.ca_topology().items()}
        configs = save(builders.ca_configurations(ns.mlcg, gen, groups), tmp_path / "c.pt")
        mixed = save(builders.sum_out(ns.mlcg, network, {}), tmp_path / "eps.pt")
        network.mixing_blocks[1].epsilon = 1e-8
        network.interaction_blocks[0].aggr = "mean"
        mean = save(builders.sum_out(ns.mlcg, network, {}), tmp_path / "mean.pt")
    with pytest.raises(MlcgImportError, match="different epsilons"):
        import_mlcg(mixed, configs)
    with pytest.raises(MlcgImportError, match="aggregation 'mean'"):
        import_mlcg(mean, configs)


def test_cli_runs_a_painn_checkpoint(tmp_path, capsys):
    from workbench.cli import main

    with install_standins() as ns:
        model, configs = builders.specialised_painn_ca(ns.mlcg, torch.Generator().manual_seed(9))
        path = save((model, configs), tmp_path / "painn_specialized_model_and_config.pt")
    argv = ["run", "--model", str(path), "--replicas", "2", "--steps", "4", "--save-interval",
            "2", "--out", str(tmp_path / "run"), "--quiet", "--device", "cpu"]
    assert main(argv) == 0
    assert "Published PaiNN checkpoint" in capsys.readouterr().out


# -- configurations ----------------------------------------------------------------------


def _ca_structures(tmp_path, types=None):
    with install_standins() as ns:
        gen = torch.Generator().manual_seed(5)
        groups = {k: (k, m) for k, m in builders.ca_topology().items()}
        configs = builders.ca_configurations(ns.mlcg, gen, groups)
        if types is not None:
            configs[1].fields["atom_types"] = torch.tensor(types)
        return save(configs, tmp_path / "structures.pt")


def test_model_without_structures_is_refused(cases):
    with pytest.raises(MlcgImportError, match="give a structures file"):
        import_mlcg(cases["model_and_prior"][0])


def test_configurations_file_as_model_is_refused(cases):
    with pytest.raises(MlcgImportError, match="is a configurations file"):
        import_mlcg(cases["model_and_prior"][1])


def test_structures_of_another_molecule_are_refused(cases, tmp_path):
    with pytest.raises(MlcgImportError, match="not the same molecule"):
        import_mlcg(cases["specialised"][0], _ca_structures(tmp_path, types=[1] * 10))
    with pytest.raises(MlcgImportError, match="bead types differ"):
        import_mlcg(cases["specialised"][0], cases["model_and_prior"][1])


def test_specialised_model_takes_positions_from_structures(cases, tmp_path):
    imported = import_mlcg(cases["specialised"][0], _ca_structures(tmp_path))
    assert imported.positions.shape == (2, 10, 3)
    assert not torch.equal(imported.positions, import_mlcg(cases["specialised"][0]).positions)


def _exclusions(max_separation):
    pairs = [(i, j) for i in range(10) for j in range(10) if 0 < abs(i - j) <= max_separation]
    return {"exc_pair_index": torch.tensor(pairs).T}


def test_bonded_exclusion_pairs_set_exclude_bonded(tmp_path):
    path, structures, _ = _ca_model(tmp_path, general_priors=True, extra=_exclusions(3))
    assert import_mlcg(path, structures).system.metadata["exclude_bonded"] is True
    path, structures, _ = _ca_model(tmp_path, general_priors=True, extra=_exclusions(2))
    with pytest.raises(MlcgImportError, match="exc_pair_index"):
        import_mlcg(path, structures)


# -- refusal of files and classes ---------------------------------------------------------


class Unlisted:
    """A class that is on no allow-list."""


class ShellCommand:
    """Unpickles to a call of os.system."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_unlisted_class_is_refused_by_name(tmp_path):
    path = save({"model": Unlisted()}, tmp_path / "unlisted.pt")
    with pytest.raises(DisallowedGlobalError, match=f"{Unlisted.__module__}.Unlisted"):
        import_mlcg(path)


def test_code_execution_is_refused(tmp_path):
    marker = tmp_path / "executed"
    path = save([ShellCommand(marker)], tmp_path / "evil.pt")
    with pytest.raises(DisallowedGlobalError, match=r"\.system'") as info:
        import_mlcg(path)
    assert info.value.global_name in ("posix.system", "nt.system", "os.system")
    assert not marker.exists()


def test_regularised_painn_is_refused(tmp_path):
    with install_standins() as ns:
        gen = torch.Generator().manual_seed(2)
        network = builders.painn(ns.mlcg, gen, cls="RBFRegularizedPaiNN")
        path = save(builders.sum_out(ns.mlcg, network, {}), tmp_path / "painn.pt")
    with pytest.raises(UnsupportedModelError, match="RBFRegularizedPaiNN"):
        import_mlcg(path)


def test_file_that_is_not_a_pickle(tmp_path):
    path = tmp_path / "notes.pt"
    path.write_text("this is not a checkpoint\n")
    with pytest.raises(MlcgImportError, match="not a readable torch checkpoint"):
        import_mlcg(path)
    with pytest.raises(FileNotFoundError):
        import_mlcg(tmp_path / "missing.pt")


def test_numpy_scalars_under_both_numpy_paths():
    data = pickle.dumps([(np.int64(3), np.float32(0.5))], protocol=2)
    assert b"numpy._core.multiarray" in data
    for module in (b"numpy._core.multiarray", b"numpy.core.multiarray"):
        value = load(io.BytesIO(data.replace(b"numpy._core.multiarray", module)))
        assert value == [(3, 0.5)] and type(value[0][0]) is int


def test_protocol_two_names_and_guarded_callables():
    assert resolve_global("__builtin__", "set") is set
    assert resolve_global("__builtin__", "long") is int
    assert resolve_global("__builtin__", "type")(None) is type(None)
    with pytest.raises(DisallowedGlobalError):
        resolve_global("__builtin__", "type")(1)
    with pytest.raises(DisallowedGlobalError):
        resolve_global("_codecs", "encode")("x", "rot13")
    with pytest.raises(DisallowedGlobalError):
        resolve_global("numpy", "dtype")("O")
    for module, name in (("builtins", "getattr"), ("builtins", "eval"), ("torch", "load")):
        with pytest.raises(DisallowedGlobalError, match=f"{module}.{name}"):
            resolve_global(module, name)
    record = resolve_global("torch_geometric.inspector", "Inspector")
    assert record.dotted_name == "torch_geometric.inspector.Inspector"


@pytest.mark.parametrize("case", ["specialised", "model_and_prior"])
def test_cli_runs_a_published_checkpoint(cases, case, tmp_path, capsys):
    from workbench.cli import main

    model, structures = cases[case][:2]
    argv = ["run", "--model", str(model), "--replicas", "3", "--steps", "4",
            "--save-interval", "2", "--out", str(tmp_path / "run"), "--quiet", "--device", "cpu"]
    if structures is not None:
        argv += ["--structures", str(structures)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Published CGSchNet checkpoint" in out
    assert "no native contacts" in out
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 3  # header + two reports of three replicas


def test_cli_refuses_structures_without_model(cases, capsys):
    from workbench.cli import main

    assert main(["run", "--structures", str(cases["model_and_prior"][1]), "--steps", "1"]) == 2
    assert "--structures needs --model" in capsys.readouterr().err
