"""deepmd-kit interoperability (workbench.model.deepmd_interop) and deepmd-kit's formulas in
CGDeepPotential (``sel``, environment statistics, timesteps): converted deepmd-kit models
give deepmd-kit's energies and forces on CLN025, through the engine and through
deepmd-kit as a backend, and the same on the engine's fast paths (tables, fused descriptor
kernel, captured grouping, 16-bit networks) as on its exact path; exports load in
deepmd-kit with the same forces; refusals."""

from __future__ import annotations

import functools
import importlib
import json
import warnings

import pytest
import torch
from helpers import (
    assert_padding_and_far_edges_add_nothing,
    exact_graph,
    finite_difference_forces,
    interpreter_only,
    needs_deepmd,
    perturbed_positions,
    random_rotation,
    relative_error,
    tiny_system,
)

from workbench.cli import main
from workbench.model import Potential, load_potential, save_potential
from workbench.model.deep_potential import (
    CGDeepPotential,
    DeepPotentialConfig,
    fused_descriptor_problem,
)
from workbench.model.deepmd_interop import (
    DeepmdFormatError,
    DeepmdModel,
    bead_type_name,
    deepmd_potential,
    network_from_deepmd,
    read_deepmd,
    save_deepmd,
    to_deepmd,
)
from workbench.model.dp_tables import TABLE_TOLERANCE, embedding_table
from workbench.model.native_priors import demo_potential
from workbench.model.options import KernelOptions
from workbench.runner import RunSettings, choose_dp_backend, choose_potential
from workbench.settings_error import SettingsError

#: CLN025's bead types, and deepmd-kit's slots per type within 8 Å (side-chain beads have at
#: most 3 neighbours of one such type, backbone beads at most 10 of one backbone type).
KINDS = sorted(set(tiny_system().bead_types.tolist()))
SEL = [4 if t <= 20 else 14 for t in KINDS]
REPLICAS = 3


def deepmd_params(one_side: bool = False, activation: str = "tanh",
                  precision: str = "float64") -> dict:
    """A small se_e2_a + ener model of CLN025's types, with timesteps in both networks."""
    return {"type_map": [bead_type_name(t) for t in KINDS],
            "descriptor": {"type": "se_e2_a", "sel": SEL, "rcut_smth": 5.0, "rcut": 8.0,
                           "neuron": [4, 8, 16], "resnet_dt": True, "axis_neuron": 4,
                           "type_one_side": one_side, "activation_function": activation,
                           "precision": precision, "seed": 1},
            "fitting_net": {"neuron": [16, 16], "resnet_dt": True,
                            "activation_function": activation, "precision": precision,
                            "seed": 2}}


def perturbed_deepmd(params: dict, seed: int = 0):
    """deepmd-kit's model of ``params`` with every weight perturbed and non-trivial
    statistics, output biases and type biases."""
    from deepmd.pt.model.model import get_model

    model = get_model(json.loads(json.dumps(params)))
    gen = torch.Generator().manual_seed(seed)
    kinds = len(params["type_map"])
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype))
        sea = model.atomic_model.descriptor.sea
        mean = torch.zeros(kinds, 1, 4, dtype=torch.float64)
        mean[:, 0, 0] = 0.05 + 0.02 * torch.rand(kinds, generator=gen, dtype=torch.float64)
        std = torch.full((kinds, 1, 4), 0.07, dtype=torch.float64)
        std[:, 0, 0] = 0.1 + 0.05 * torch.rand(kinds, generator=gen, dtype=torch.float64)
        sea.mean.copy_(mean.expand_as(sea.mean))
        sea.stddev.copy_(std.expand_as(sea.stddev))
        fitting = model.atomic_model.fitting_net
        fitting.bias_atom_e.copy_(torch.randn(kinds, 1, generator=gen, dtype=torch.float64))
        model.atomic_model.out_bias.copy_(torch.randn(1, kinds, 1, generator=gen,
                                                      dtype=torch.float64))
    return model.eval()


def deepmd_reference(model, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """deepmd-kit's energies ``(R,)`` and forces ``(R, n, 3)``, replicas as frames, its own
    neighbour lists, no box."""
    kinds = torch.tensor([KINDS.index(t) for t in tiny_system().bead_types.tolist()])
    out = model(pos.reshape(pos.shape[0], -1), kinds.repeat(pos.shape[0], 1), box=None)
    return out["energy"][:, 0].detach(), out["force"].detach()


def engine(network: CGDeepPotential, pos: torch.Tensor, options: KernelOptions | None = None,
           graph=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The network's energies ``(R,)`` and forces ``(R, n, 3)`` (exact graph unless given)."""
    pos = pos.detach().clone().requires_grad_()
    types = tiny_system().bead_types.repeat(pos.shape[0])
    graph = exact_graph(pos.detach(), network.cutoff) if graph is None else graph
    energy = network(pos.reshape(-1, 3), types, graph, options)
    energy = energy.reshape(pos.shape[0], -1).sum(-1)
    (grad,) = torch.autograd.grad(energy.sum(), pos)
    return energy.detach(), -grad


def seeded(seed: int, build):
    """``build()`` under a fixed seed, the global RNG left as it was."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build()


def stats_network(one_side: bool = False) -> CGDeepPotential:
    """A float64 network with sel (CLN025's types), non-trivial statistics and timesteps."""
    sel = [4 if t in KINDS and t <= 20 else 14 if t in KINDS else 0 for t in range(25)]
    config = DeepPotentialConfig(
        cutoff=8.0, cutoff_smooth=5.0, embedding_widths=[4, 8, 16], axis_neurons=4,
        fitting_widths=[16, 16], num_neighbors=float(sum(sel)), sel=sel,
        embedding_resnet_dt=True, fitting_resnet_dt=True, type_one_side=one_side)
    network = seeded(3, lambda: CGDeepPotential(config).double())
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        network.env_mean[:, 0] = 0.05 + 0.02 * torch.rand(25, generator=gen, dtype=torch.float64)
        network.env_std.copy_(0.07 + 0.05 * torch.rand(25, 2, generator=gen, dtype=torch.float64)[
            :, [0, 1, 1, 1]])  # one deviation of the directions: rotation invariant
        network.fitting_out.mul_(0.1)
    return network


# -- deepmd-kit's formulas in the engine (no deepmd-kit needed) ------------------------------
def test_identity_statistics_reduce_to_the_plain_model():
    plain = seeded(0, lambda: CGDeepPotential(DeepPotentialConfig(
        cutoff=8.0, cutoff_smooth=5.0, embedding_widths=[4, 8], axis_neurons=2,
        fitting_widths=[8], num_neighbors=50.0)).double())
    lists = CGDeepPotential(DeepPotentialConfig(**{**plain.config.to_dict(),
                                                   "sel": [2] * 25})).double()
    missing, unexpected = lists.load_state_dict(plain.state_dict(), strict=False)
    assert sorted(missing) == ["env_mean", "env_std"] and not unexpected
    pos = perturbed_positions(replicas=2)
    e_plain, f_plain = engine(plain, pos)
    e_lists, f_lists = engine(lists, pos)
    torch.testing.assert_close(e_lists, e_plain, rtol=1e-13, atol=0)
    torch.testing.assert_close(f_lists, f_plain, rtol=1e-12, atol=1e-13)
    with torch.no_grad():  # statistics change the model
        lists.env_mean[:, 0] = 0.1
    assert relative_error(engine(lists, pos)[1], f_plain) > 1e-2


def test_statistics_model_is_smooth_invariant_and_padding_adds_nothing():
    network = stats_network()
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=2)
    numeric = finite_difference_forces(functools.partial(engine_energy, network), pos[0])
    torch.testing.assert_close(engine(network, pos)[1][0], numeric, rtol=1e-6, atol=1e-7)

    def energy_and_forces(p, graph=None):
        p = p.detach().clone().requires_grad_()
        types = tiny_system().bead_types.repeat(p.shape[0])
        graph = exact_graph(p.detach(), network.cutoff) if graph is None else graph
        e = network(p.reshape(-1, 3), types, graph).reshape(p.shape[0], -1).sum(-1)
        (g,) = torch.autograd.grad(e.sum(), p)
        return e.detach(), -g

    assert_padding_and_far_edges_add_nothing(energy_and_forces, pos, network.cutoff)
    rotation = random_rotation(seed=1)
    energy, forces = energy_and_forces(pos)
    e_rot, f_rot = energy_and_forces(pos @ rotation.T + 3.0)
    torch.testing.assert_close(e_rot, energy, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(f_rot, forces @ rotation.T, rtol=1e-10, atol=1e-11)


def engine_energy(network: CGDeepPotential, pos: torch.Tensor,
                  options: KernelOptions | None = None) -> torch.Tensor:
    types = tiny_system().bead_types.repeat(pos.shape[0])
    graph = exact_graph(pos, network.cutoff)
    return network(pos.reshape(-1, 3), types, graph, options).reshape(pos.shape[0], -1).sum(-1)


def test_export_import_and_saved_files_round_trip_without_deepmd_kit(tmp_path):
    network = stats_network()
    exported = to_deepmd(network)
    assert exported.params["type_map"][:3] == ["ASP", "GLU", "GLY"]
    assert exported.params["type_map"][-4:] == ["N", "CA", "C", "O"]
    back, types = network_from_deepmd(exported, embedding_size=25)
    assert types == KINDS and back.config == network.config
    exported.params["type_map"] = [str(t) for t in KINDS]  # numbers name types as well
    assert network_from_deepmd(exported)[1] == KINDS
    pos = perturbed_positions(replicas=2, sigma=0.3)
    for got, want in zip(engine(back, pos), engine(network, pos), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
    path = save_potential(Potential(tiny_system().bead_types, back.float()), tmp_path / "dp.pt")
    loaded = load_potential(path).network  # float32, as potentials are
    assert loaded.config.sel == network.config.sel
    for got, want in zip(engine(loaded, pos.float()), engine(back, pos.float()), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_export_without_lists_folds_the_normalisation_into_the_fitting_network():
    network = seeded(4, lambda: CGDeepPotential(DeepPotentialConfig(
        cutoff=8.0, cutoff_smooth=5.0, embedding_widths=[4, 8], axis_neurons=2,
        fitting_widths=[8, 16], num_neighbors=20.0, type_one_side=True)).double())
    back, _ = network_from_deepmd(to_deepmd(network, KINDS, SEL), embedding_size=25)
    assert back.config.num_neighbors == sum(SEL) != 20.0
    pos = perturbed_positions(replicas=2, sigma=0.3)
    for got, want in zip(engine(back, pos), engine(network, pos), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="give sel"):
        to_deepmd(network, KINDS)
    with pytest.raises(ValueError, match="export every type with slots"):
        to_deepmd(stats_network(), KINDS[:-1])
    shortcut = CGDeepPotential(DeepPotentialConfig(embedding_widths=[4, 8], axis_neurons=2,
                                                   fitting_widths=[16]))
    with pytest.raises(ValueError, match="first fitting layer has a shortcut"):
        to_deepmd(shortcut, KINDS, SEL)


# -- the engine's fast paths on a converted model (no deepmd-kit needed) ------------------------
def converted_network(one_side: bool = False) -> CGDeepPotential:
    """`stats_network` (statistics, sel, timesteps in both networks) through deepmd-kit's
    format and back: a converted deepmd-kit model, float64. The deviations of the first
    column are four times `stats_network`'s, which keeps the tables' input range, and so
    their grid, small (512 intervals instead of 4,096)."""
    network = stats_network(one_side)
    with torch.no_grad():
        network.env_std[:, 0] *= 4.0
    return network_from_deepmd(to_deepmd(network), embedding_size=25)[0]


TABLES = KernelOptions(tabulated_filter=True)
FUSED = KernelOptions(fused_message_passing=True)


@pytest.mark.parametrize("one_side", [False, True], ids=["pairs", "one-side"])
def test_tables_of_a_converted_model_match_its_exact_path(one_side):
    """The tables are keyed on the normalised input (whose range starts at the empty slots'
    ``-mu/sigma < 0``) and read for the edges and the empty slots alike: within the tables'
    bound of the exact path, also captured (static grouping) and with 16-bit networks, and
    their forces are −∂E/∂r of the tabulated model, smooth across the cutoff."""
    network = converted_network(one_side)
    pos = perturbed_positions(replicas=1, sigma=0.15, seed=4)
    assert network.embedding_input_range()[0] < -0.2
    assert embedding_table(network, torch.float64, pos.device).error <= TABLE_TOLERANCE
    e_exact, f_exact = engine(network, pos)
    for options in (TABLES, KernelOptions(tabulated_filter=True, cuda_graph=True)):
        energy, forces = engine(network, pos, options)
        assert relative_error(energy, e_exact) < 1e-5
        assert 0 < relative_error(forces, f_exact) < 1e-5  # bound of docs/deep-potential.md
    numeric = finite_difference_forces(functools.partial(engine_energy, network,
                                                         options=TABLES), pos[0])
    assert relative_error(engine(network, pos, TABLES)[1][0], numeric) < 1e-7
    assert_padding_and_far_edges_add_nothing(
        lambda p, graph=None: engine(network, p, TABLES, graph), pos, network.cutoff)
    for tables in (False, True):
        half = KernelOptions(tabulated_filter=tables, mlp_precision="fp16")
        assert 1e-6 < relative_error(engine(network, pos, half)[1], f_exact) < 1e-3  # 16-bit


@interpreter_only
def test_fused_kernel_on_a_converted_model_matches_its_tables_and_exact_paths(monkeypatch):
    """The descriptor kernel gets the model's statistics and the empty slots' tabulated
    embeddings: the tables path's energies and forces (float32), eager and captured."""
    module = importlib.import_module("kernels.dp_descriptor")
    network64 = converted_network()
    network = converted_network().float()
    pos = perturbed_positions(replicas=1, sigma=0.15, seed=4)
    e_exact, f_exact = engine(network64, pos)
    assert fused_descriptor_problem(network, pos.device, FUSED) is None
    given = []
    kernel = module.dp_descriptor
    monkeypatch.setattr(module, "dp_descriptor",
                        lambda *args: given.append(args[-1]) or kernel(*args))
    e_tables, f_tables = engine(network, pos.float(), TABLES)
    for options in (FUSED, KernelOptions(fused_message_passing=True, cuda_graph=True)):
        energy, forces = engine(network, pos.float(), options)
        assert relative_error(energy, e_tables) < 1e-5 and relative_error(forces, f_tables) < 1e-5
        assert relative_error(forces.double(), f_exact) < 1e-5
    assert len(given) == 2 and all(s is not None and s.empty.abs().max() > 0 for s in given)


@pytest.mark.parametrize(("section", "change", "message"), [
    ("descriptor", {"type": "se_atten"}, "descriptor 'se_atten' is not supported"),
    ("fitting_net", {"type": "dipole"}, "fitting 'dipole' is not supported"),
    ("fitting_net", {"numb_fparam": 2}, "fitting_net.numb_fparam = 2 is not supported"),
    ("descriptor", {"exclude_types": [[0, 1]]}, "descriptor.exclude_types"),
    ("descriptor", {"env_protection": 0.1}, "descriptor.env_protection"),
    ("fitting_net", {"activation_function": "silu"}, "different activations"),
    ("descriptor", {"activation_function": "gelu"}, "different activations"),
    ("model", {"type_map": [bead_type_name(t) for t in KINDS[:-1]] + ["XYZ"]},
     r"type_map names \['XYZ'\] are no bead types"),
    ("model", {"pair_exclude_types": [[0, 1]]}, "model.pair_exclude_types"),
    ("model", {"type": "zbl"}, "model type 'zbl' is not supported"),
])
def test_uncovered_models_are_refused_by_name(section, change, message):
    params = deepmd_params()
    if section == "model":
        params.update(change)
    else:
        params[section].update(change)
    with pytest.raises(DeepmdFormatError, match=message):
        network_from_deepmd(DeepmdModel(params, {}))


def test_files_that_are_not_deepmd_models_are_refused(tmp_path):
    own = save_potential(Potential(tiny_system().bead_types, stats_network().float()),
                         tmp_path / "own.pt")
    with pytest.raises(DeepmdFormatError, match="no model._extra_state.model_params"):
        read_deepmd(own)
    multi = tmp_path / "multi.pt"
    torch.save({"model": {"_extra_state": {"model_params": {"model_dict": {}}}}}, multi)
    with pytest.raises(DeepmdFormatError, match="multi-task"):
        read_deepmd(multi)
    partial = tmp_path / "partial.pt"  # a checkpoint's layout, written without deepmd-kit
    model = to_deepmd(stats_network(), KINDS)
    model.params["type_map"][KINDS.index(21)] = "NX"
    torch.save({"model": {"_extra_state": {"model_params": model.params},
                          **{"model.Default." + k: v for k, v in model.state.items()}}}, partial)
    with pytest.raises(DeepmdFormatError, match=r"names \['NX'\] are no bead types"):
        deepmd_potential(partial, tiny_system())
    with pytest.raises(DeepmdFormatError, match=r"no type for the bead types \['N'\]"):
        deepmd_potential(partial, tiny_system(), type_names={"NX": 0})
    model.state["atomic_model.descriptor.sea.mean"][0, :, 1] = 0.01
    with pytest.raises(DeepmdFormatError, match="would not be rotation invariant"):
        network_from_deepmd(model, type_names={"NX": 21})
    frozen = tmp_path / "broken.pth"
    frozen.write_bytes(b"not a TorchScript archive")
    with pytest.raises(DeepmdFormatError, match="not a frozen deepmd-kit PyTorch model"):
        read_deepmd(frozen)


def test_the_deepmd_backend_needs_lists_and_says_so():
    potential = Potential(tiny_system().bead_types, seeded(0, CGDeepPotential))
    notice = choose_dp_backend(potential, "deepmd")
    assert "no deepmd-kit neighbour lists" in notice and potential.network.backend == "engine"
    with pytest.raises(ValueError, match="unknown Deep Potential backend 'tf'"):
        potential.network.backend = "tf"
    with pytest.raises(SettingsError, match="dp_backend must be one of engine, deepmd"):
        RunSettings(dp_backend="tf")


# -- against deepmd-kit ------------------------------------------------------------------------
@needs_deepmd
@pytest.mark.parametrize(("one_side", "activation"), [(False, "tanh"), (True, "silu")])
def test_converted_models_give_deepmd_kits_energies_and_forces(one_side, activation):
    from deepmd.pt.model.model import get_model

    reference_model = perturbed_deepmd(deepmd_params(one_side, activation))
    model = DeepmdModel(deepmd_params(one_side, activation), reference_model.state_dict())
    network, types = network_from_deepmd(model)
    assert types == KINDS and network.config.type_one_side == one_side
    pos = perturbed_positions(replicas=REPLICAS, sigma=0.3, seed=1)
    e_ref, f_ref = deepmd_reference(reference_model, pos)
    e64, f64 = engine(network, pos)
    assert relative_error(e64, e_ref) < 1e-13 and relative_error(f64, f_ref) < 1e-13
    params32 = deepmd_params(one_side, activation, precision="float32")
    model32 = get_model(json.loads(json.dumps(params32)))  # the same weights, rounded
    dtypes = {k: v.dtype for k, v in model32.state_dict().items()}
    model32.load_state_dict({k: v.to(dtypes[k]) for k, v in model.state.items()})
    e32_ref, f32_ref = deepmd_reference(model32.eval(), pos.float())
    e32, f32 = engine(network_from_deepmd(DeepmdModel(params32, model32.state_dict()))[0],
                      pos.float())
    assert relative_error(e32, e32_ref) < 1e-5 and relative_error(f32, f32_ref) < 1e-5
    network.backend = "deepmd"  # deepmd-kit's own model of the same weights
    e_dp, f_dp = engine(network, pos)
    assert relative_error(e_dp, e_ref) < 1e-13 and relative_error(f_dp, f_ref) < 1e-13


@needs_deepmd
def test_exported_model_loads_in_deepmd_kit_with_the_same_forces(tmp_path):
    from deepmd.infer import DeepPot

    network = seeded(5, lambda: CGDeepPotential(DeepPotentialConfig(
        cutoff=8.0, cutoff_smooth=5.0, embedding_widths=[4, 8], axis_neurons=2,
        fitting_widths=[8, 8], num_neighbors=30.0, fitting_resnet_dt=True)).double())
    path = save_deepmd(network, tmp_path / "exported.pt", bead_types=KINDS, sel=SEL)
    evaluator = DeepPot(str(path), no_jit=True)  # scripting it would take seconds
    assert evaluator.get_type_map() == [bead_type_name(t) for t in KINDS]
    pos = perturbed_positions(replicas=REPLICAS, sigma=0.3, seed=2)
    kinds = [KINDS.index(t) for t in tiny_system().bead_types.tolist()]
    energy, forces, _ = evaluator.eval(pos.reshape(REPLICAS, -1).numpy(), None, kinds)
    e_engine, f_engine = engine(network, pos)
    assert relative_error(torch.as_tensor(energy)[:, 0], e_engine) < 1e-13
    assert relative_error(torch.as_tensor(forces).reshape(f_engine.shape), f_engine) < 1e-13
    back, _ = network_from_deepmd(read_deepmd(path), embedding_size=25)
    for got, want in zip(engine(back, pos), (e_engine, f_engine), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@needs_deepmd
def test_a_model_trained_and_frozen_by_deepmd_kit_runs_in_the_engine(tmp_path, monkeypatch):
    import numpy as np
    from deepmd.infer import DeepPot
    from deepmd.pt.entrypoints.main import main as dp

    beads = tiny_system().bead_types.tolist()
    data = tmp_path / "data"
    (data / "set.000").mkdir(parents=True)
    (data / "type.raw").write_text("\n".join(str(KINDS.index(t)) for t in beads))
    (data / "type_map.raw").write_text("\n".join(bead_type_name(t) for t in KINDS))
    (data / "nopbc").write_text("")
    frames = perturbed_positions(replicas=4, sigma=0.3, seed=3)
    rng = np.random.default_rng(0)
    np.save(data / "set.000" / "coord.npy", frames.reshape(4, -1).numpy())
    np.save(data / "set.000" / "energy.npy", rng.normal(size=4))
    np.save(data / "set.000" / "force.npy", rng.normal(size=(4, 3 * len(beads))))
    params = deepmd_params()
    params["descriptor"].update(neuron=[4, 8], axis_neuron=2, precision="float32")
    params["fitting_net"].update(neuron=[8, 8], precision="float32")
    recipe = {"model": params,
              "learning_rate": {"type": "exp", "start_lr": 1e-3, "stop_lr": 1e-4,
                                "decay_steps": 5},
              "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1,
                       "start_pref_f": 1000, "limit_pref_f": 1},
              "training": {"training_data": {"systems": [str(data)], "batch_size": 2},
                           "numb_steps": 3, "seed": 1, "disp_freq": 3, "save_freq": 3}}
    (tmp_path / "input.json").write_text(json.dumps(recipe))
    monkeypatch.chdir(tmp_path)
    dp(["train", "input.json"])
    dp(["freeze", "-o", "frozen.pth"])
    pos = perturbed_positions(replicas=REPLICAS, sigma=0.3, seed=4)
    kinds = [KINDS.index(t) for t in beads]
    energy, forces, _ = DeepPot("model.ckpt.pt", no_jit=True).eval(
        pos.reshape(REPLICAS, -1).numpy(), None, kinds)
    energy = torch.as_tensor(energy, dtype=torch.float64)[:, 0]
    forces = torch.as_tensor(forces, dtype=torch.float64).reshape(pos.shape)
    for name in ("model.ckpt.pt", "frozen.pth"):  # the frozen model holds the same weights
        network = deepmd_potential(tmp_path / name, tiny_system()).network
        assert network.env_std.abs().sub(1).abs().max() > 0.01  # statistics were measured
        e32, f32 = engine(network, pos.float())
        assert relative_error(e32.double(), energy) < 1e-5
        assert relative_error(f32.double(), forces) < 1e-5
    chosen, notice = choose_potential(tiny_system(), str(tmp_path / "model.ckpt.pt"), "dp")
    assert chosen.architecture == "dp" and "deepmd-kit model" in notice
    code = main(["run", "--protein", "cln025", "--replicas", "2", "--steps", "2",
                 "--save-interval", "2", "--device", "cpu", "--quiet", "--no-trajectory",
                 "--model", "model.ckpt.pt", "--dp-backend", "deepmd", "--out", "run"])
    assert code == 0
    assert json.loads((tmp_path / "run" / "run.json").read_text())["settings"][
        "dp_backend"] == "deepmd"  # what ran


@needs_deepmd
def test_the_deepmd_backend_runs_none_of_the_engines_techniques():
    potential = Potential(tiny_system().bead_types, converted_network())
    options = KernelOptions(tabulated_filter=True, fused_message_passing=True, cuda_graph=True,
                            fused_integrator=True, mlp_precision="fp16")
    notice = choose_dp_backend(potential, "deepmd", options)
    assert potential.network.backend == "deepmd"
    assert "fused_message_passing, tabulated_filter, cuda_graph, mlp_precision=fp16 are " \
           "switched off" in notice
    assert options == KernelOptions(fused_integrator=True)  # the step's own stays
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=5)
    e_ref, f_ref = engine(potential.network, pos)
    with pytest.warns(RuntimeWarning, match="deepmd backend runs deepmd-kit's model: "
                                         "tabulated_filter ignored"):
        energy, forces = engine(potential.network, pos, TABLES)
    assert torch.equal(energy, e_ref) and torch.equal(forces, f_ref)


@needs_deepmd
def test_the_backend_keeps_deepmd_kits_nearest_neighbours_where_sel_is_short():
    params = deepmd_params(one_side=True)
    params["descriptor"]["sel"] = [1] * len(KINDS)  # fewer slots than neighbours
    reference_model = perturbed_deepmd(params)
    network, _ = network_from_deepmd(DeepmdModel(params, reference_model.state_dict()))
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=6)
    e_ref, f_ref = deepmd_reference(reference_model, pos)
    assert relative_error(engine(network, pos)[1], f_ref) > 1e-3  # the engine keeps them all
    network.backend = "deepmd"
    with pytest.warns(RuntimeWarning, match=r"deepmd-kit drops \d+ neighbours within the "
                      r"cutoff .* its energies differ from the engine's path"):
        e_dp, f_dp = engine(network, pos)
    assert relative_error(e_dp, e_ref) < 1e-13 and relative_error(f_dp, f_ref) < 1e-13


@needs_deepmd
def test_the_demo_model_runs_through_deepmd_kit_with_the_engines_forces():
    potential = demo_potential(tiny_system(), architecture="dp")
    assert choose_dp_backend(potential, "deepmd") is None
    network = potential.network
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=7, dtype=torch.float32)
    network.backend = "engine"
    e_engine, f_engine = engine(network, pos)
    network.backend = "deepmd"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no neighbour dropped: its slots have room
        e_dp, f_dp = engine(network, pos)
    assert relative_error(e_dp, e_engine) < 1e-5 and relative_error(f_dp, f_engine) < 1e-5
