"""Captured whole steps: the static-shape step (what a CUDA graph replays) run on the CPU
must give the eager trajectory bit for bit, redo a chunk that overflowed, and capture
again when options change. On a GPU (marked ``gpu``): replays give the eager trajectory bit
for bit (with deterministic CSR aggregation), overflow is redone, and a step is one graph
launch."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from helpers import interpreter_only, prior_potential, schnet_potential, tiny_system

from workbench.benchmark import launches_per_step
from workbench.md import LangevinIntegrator, NeighborSettings, Simulation
from workbench.md.captured_steps import (
    HEADROOM,
    SEARCHED_HEADROOM,
    CapturedSteps,
    captured_steps_problem,
)
from workbench.model import fused_schnet
from workbench.model.deep_potential import CGDeepPotential, DeepPotentialConfig
from workbench.model.egnn import CGEGNN, EGNNConfig
from workbench.model.native_priors import native_priors
from workbench.model.options import KernelOptions
from workbench.model.painn import CGPaiNN, PaiNNConfig
from workbench.model.potential import Potential
from workbench.runner import RunSettings, prepare_run
from workbench.system import build_system

GRAPH = KernelOptions(cuda_graph=True)
SEARCH = KernelOptions(cuda_graph=True, fused_pair_search=True)


@pytest.fixture(scope="module")
def potential():
    return schnet_potential(seed=3)


def make_sim(potential, options=GRAPH, replicas=2, seed=7):
    return Simulation(
        tiny_system(), potential, LangevinIntegrator(0.004, 1.0, 350.0), replicas=replicas,
        seed=seed, options=KernelOptions(**options.to_dict()),
        neighbors=NeighborSettings(skin=0.5),
    )


def eager_steps(sim, steps):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "CUDA graphs off" on a CPU
        sim.step(steps)


def assert_same_state(a, b):
    for name, x, y in zip(a.state._fields, a.state, b.state, strict=True):
        assert torch.equal(x, y), name
    assert a.step_count == b.step_count


def test_static_step_reproduces_the_eager_trajectory(potential):
    eager, captured = make_sim(potential), make_sim(potential)
    eager_steps(eager, 6)
    steps = CapturedSteps(captured)
    steps.advance(4)
    steps.advance(2)
    assert_same_state(eager, captured)
    assert steps.captures == 1
    assert captured.graph.valid is not None and captured.graph.num_edges == 2 * steps.slots


@interpreter_only
def test_searched_graph_steps_reproduce_the_eager_trajectory(potential):
    options = SEARCH
    eager, captured = (make_sim(potential, options, replicas=1) for _ in range(2))
    assert eager.searches_pairs()
    eager_steps(eager, 4)
    assert eager.graph.csr is not None  # the eager steps searched, too
    steps = CapturedSteps(captured)
    steps.advance(4)
    assert_same_state(eager, captured)
    # the same physics as the Verlet list (only the padding slots differ)
    verlet = make_sim(potential, KernelOptions(**{**options.to_dict(), "fused_pair_search": False}),
                      replicas=1)
    eager_steps(verlet, 4)
    torch.testing.assert_close(verlet.positions, captured.positions, rtol=1e-5, atol=1e-5)


@interpreter_only
def test_fused_langevin_steps_reproduce_the_eager_trajectory(potential):
    options = KernelOptions(cuda_graph=True, fused_integrator=True)
    eager, captured = make_sim(potential, options), make_sim(potential, options)
    assert eager.fuses_steps()
    # forces summed by autograd can come with transposed strides (fused priors on a GPU)
    captured.forces = captured.forces.transpose(0, 1).contiguous().transpose(0, 1)
    assert not captured.forces.is_contiguous()
    eager_steps(eager, 4)
    CapturedSteps(captured).advance(4)
    assert_same_state(eager, captured)
    # the same dynamics as the tensor-operation integrator (same noise, FP32 rounding apart)
    plain = make_sim(potential, GRAPH)
    eager_steps(plain, 4)
    torch.testing.assert_close(plain.positions, captured.positions, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(plain.velocities, captured.velocities, rtol=1e-4, atol=1e-4)


@interpreter_only
def test_fused_langevin_steps_freeze_a_replica_as_the_plain_step_does(potential):
    fused = make_sim(potential, KernelOptions(fused_integrator=True), replicas=3)
    plain = make_sim(potential, KernelOptions(), replicas=3)
    for sim in (fused, plain):
        sim.velocities[1] *= 1e5  # replica 1 flies apart within a step
        sim.step_count = 40
        eager_steps(sim, 2)
    assert fused.frozen_report() == plain.frozen_report() == [(1, 41)]
    assert torch.equal(fused.positions[1], plain.positions[1])


@interpreter_only
def test_searched_graph_overflow_redoes_the_chunk(potential):
    # one replica: the interpreter runs a program per bead and pass
    eager, captured = make_sim(potential, SEARCH, replicas=1), make_sim(potential, SEARCH,
                                                                        replicas=1)
    eager._search_slots = 20  # the eager step grows its capacity, too
    eager_steps(eager, 2)
    assert eager._search_slots > 20
    steps = CapturedSteps(captured)
    # the pair search's slots are shared by the replicas: less headroom than per replica
    needed = captured.neighbor_list.slots_needed(captured.positions)
    assert steps.slots == math.ceil(SEARCHED_HEADROOM * needed) + 1
    steps.slots = 20
    steps.advance(2)
    assert steps.slots > 20 and steps.captures == 2
    assert_same_state(eager, captured)


def test_prior_only_potential_needs_no_neighbour_list():
    pot = prior_potential()
    eager, captured = make_sim(pot, replicas=3), make_sim(pot, replicas=3)
    eager_steps(eager, 5)
    steps = CapturedSteps(captured)
    steps.advance(5)
    assert steps.slots == 0
    assert_same_state(eager, captured)


def test_a_system_searched_by_cells_is_not_captured():
    copies = build_system("cln025*3")
    sim = Simulation(copies, schnet_potential(copies, seed=1),
                     LangevinIntegrator(0.004, 1.0, 350.0), replicas=2, seed=7,
                     options=KernelOptions(**GRAPH.to_dict()),
                     neighbors=NeighborSettings(skin=0.5, cell_list_above=0))
    assert captured_steps_problem(sim).startswith("the system has 147 beads per replica, "
                                                  "above the 0 up to which")
    assert not sim.applied_options().cuda_graph


def test_overflow_redoes_the_chunk_with_more_slots(potential):
    eager, captured = make_sim(potential), make_sim(potential)
    eager_steps(eager, 3)
    steps = CapturedSteps(captured)
    needed = captured.neighbor_list.slots_needed(captured.positions)
    assert steps.slots == math.ceil(HEADROOM * needed) + 1
    steps.slots = 20  # far too few: edges would be lost
    steps.advance(3)
    assert steps.slots > 20 and steps.captures == 2
    assert_same_state(eager, captured)


@interpreter_only
def test_changed_options_are_captured_again(potential):
    sim = make_sim(potential)
    steps = CapturedSteps(sim)
    steps.advance(1)
    steps.advance(1)
    assert steps.captures == 1
    sim.options.csr_aggregation = True
    steps.advance(1)
    assert steps.captures == 2


def test_changed_weights_are_captured_again():
    pot = schnet_potential(seed=4)
    sim = make_sim(pot)
    steps = CapturedSteps(sim)
    steps.advance(1)
    with torch.no_grad():
        pot.schnet.embedding_layer.weight.mul_(1.5)
    steps.advance(1)
    assert steps.captures == 2


def test_frozen_replicas_match_the_eager_run(potential):
    eager, captured = make_sim(potential, replicas=3), make_sim(potential, replicas=3)
    for sim in (eager, captured):
        sim.velocities[1] *= 1e5  # replica 1 flies apart within a step
        sim.step_count = 40
    eager_steps(eager, 2)
    CapturedSteps(captured).advance(2)
    assert_same_state(eager, captured)
    assert captured.frozen_report() == [(1, 41)]


def test_caller_never_sees_buffers_that_a_later_chunk_overwrites(potential):
    sim = make_sim(potential)
    steps = CapturedSteps(sim)
    steps.advance(1)
    before = sim.positions
    kept = before.clone()
    steps.advance(2)
    assert torch.equal(before, kept)
    assert not torch.equal(sim.positions, kept)


def network_potential(architecture: str) -> Potential:
    """A small CGEGNN, CGPaiNN, CGDeepPotential or CGTensorProduct (fused kernels need
    power-of-two widths) with the priors."""
    sys = tiny_system()
    torch.manual_seed(5)
    if architecture == "nequip":
        pytest.importorskip("e3nn")
        from workbench.model.tensor_product import CGTensorProduct, TensorProductConfig

        network = CGTensorProduct(TensorProductConfig(
            irreps="8x0e + 4x1o", blocks=1, num_rbf=6, radial_width=16, cutoff=4.0,
            output_widths=[8]))
    elif architecture == "egnn":
        network = CGEGNN(EGNNConfig(hidden=16, edge_width=16, layers=1, num_rbf=8, cutoff=6.0))
    elif architecture == "dp":
        network = CGDeepPotential(DeepPotentialConfig(
            cutoff=6.0, cutoff_smooth=4.0, embedding_widths=[4, 8, 16], axis_neurons=4,
            fitting_widths=[16, 16], num_neighbors=8.0))
    else:
        network = CGPaiNN(PaiNNConfig(embedding_size=25, hidden=16, blocks=1, num_rbf=8,
                                      cutoff=6.0))
    return Potential(sys.bead_types, network, native_priors(sys))


@interpreter_only
@pytest.mark.parametrize("architecture", ["egnn", "painn", "dp"])
def test_static_steps_of_fused_egnn_and_painn_reproduce_the_eager_trajectory(architecture):
    """What a CUDA graph replays for these networks: their fused path with static shapes."""
    pot = network_potential(architecture)
    options = KernelOptions(cuda_graph=True, fused_message_passing=True,
                            tabulated_filter=architecture == "dp")
    eager, captured = make_sim(pot, options, replicas=1), make_sim(pot, options, replicas=1)
    eager_steps(eager, 2)
    steps = CapturedSteps(captured)
    steps.advance(2)
    assert_same_state(eager, captured)
    assert steps.captures == 1


def test_static_steps_of_a_tabulated_deep_potential_reproduce_the_eager_trajectory():
    """What a CUDA graph replays for a Deep Potential: its tables (gathered per edge by
    network) and its fitting networks grouped with fixed shapes, over the static graph."""
    pot = network_potential("dp")
    options = KernelOptions(cuda_graph=True, tabulated_filter=True)
    eager, captured = make_sim(pot, options, replicas=2), make_sim(pot, options, replicas=2)
    eager_steps(eager, 3)
    steps = CapturedSteps(captured)
    steps.advance(3)
    assert steps.captures == 1 and captured.step_count == eager.step_count
    for name, a, b in zip(eager.state._fields, eager.state, captured.state, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("architecture", ["egnn", "painn", "dp"])
def test_egnn_and_painn_steps_are_captured_only_on_their_fused_path(architecture,
                                                                   monkeypatch):
    pot = network_potential(architecture)
    sim = make_sim(pot, KernelOptions(cuda_graph=True))
    monkeypatch.setattr(sim, "device", torch.device("cuda"))  # past the device and
    monkeypatch.setattr(torch.cuda.CUDAGraph, "register_generator_state",  # PyTorch checks
                        lambda *_: None, raising=False)
    kernels = "fused_message_passing, tabulated_filter" if architecture in ("dp", "painn") \
        else "fused_message_passing"
    assert f"need its kernels ({kernels})" in captured_steps_problem(sim)
    sim.options.fused_message_passing = True
    problem = captured_steps_problem(sim)
    assert problem is None or "need its kernels" not in problem  # the kernels' own reason


def test_static_steps_of_nequip_reproduce_the_eager_trajectory():
    """What a CUDA graph replays for a tensor-product network: its e3nn path over the static
    graph (padding slots add exact zeros); a changed convolution backend is captured
    again."""
    pot = network_potential("nequip")
    eager, captured = make_sim(pot, replicas=1), make_sim(pot, replicas=1)
    eager_steps(eager, 2)
    steps = CapturedSteps(captured)
    steps.advance(2)
    assert_same_state(eager, captured)
    assert steps.captures == 1
    pot.network.backend = "openequivariance"  # runs e3nn on a CPU, with a warning
    with pytest.warns(RuntimeWarning, match="openequivariance' unavailable"):
        steps.advance(1)
    assert steps.captures == 2


def test_nequip_steps_are_captured_on_openequivariance_only(monkeypatch):
    # captured e3nn steps evaluate every slot of the fixed capacity: slower than eager ones
    sim = make_sim(network_potential("nequip"),
                   KernelOptions(cuda_graph=True, fused_update=True))
    monkeypatch.setattr(sim, "device", torch.device("cuda"))  # past the device and
    monkeypatch.setattr(torch.cuda.CUDAGraph, "register_generator_state",  # PyTorch checks
                        lambda *_: None, raising=False)
    for backend in ("e3nn", "cuequivariance"):
        sim.potential.network.backend = backend
        assert captured_steps_problem(sim).startswith(
            f"no captured steps for nequip networks on the {backend} backend (")
    sim.potential.network.backend = "openequivariance"
    problem = captured_steps_problem(sim)  # what is left is the kernels' own check
    assert problem is None or "backend" not in problem


def test_the_tensor_product_backends_settle_the_capture_switch():
    from workbench.runner import NETWORK_BACKENDS

    backends = NETWORK_BACKENDS["nequip"]
    options = KernelOptions(cuda_graph=True, fused_update=True)
    notice = backends.settle_options("e3nn", options)
    assert options == KernelOptions(fused_update=True)
    assert notice.startswith("Tensor-product backend 'e3nn': cuda_graph is switched off (")
    options = KernelOptions(cuda_graph=True, fused_update=True)
    assert backends.settle_options("openequivariance", options) is None
    assert options.cuda_graph
    assert backends.settle_options("e3nn", KernelOptions(fused_update=True)) is None


def test_cpu_simulation_says_why_it_steps_eagerly(potential, monkeypatch):
    monkeypatch.setattr(fused_schnet, "_WARNED", set())  # earlier tests used up the notice
    sim = make_sim(potential)
    assert "CUDA" in captured_steps_problem(sim)
    with pytest.warns(RuntimeWarning, match="CUDA graphs off"):
        sim.step(1)
    assert sim.step_count == 1


# whole-step CUDA graphs on a GPU
def gpu_run(options: KernelOptions, replicas: int = 16, protein: str = "1enh",
            architecture: str | None = None, tp_backend: str = "e3nn"):
    settings = RunSettings(protein=protein, replicas=replicas, device="cuda", seed=3,
                           options=options, architecture=architecture, tp_backend=tp_backend)
    return prepare_run(settings).simulation


@pytest.mark.gpu
@pytest.mark.parametrize("tables", [False, True], ids=["exact", "tables"])
def test_graph_replays_match_eager_steps_bitwise(tables):
    eager = gpu_run(KernelOptions.all_on(tabulated_filter=tables))
    graphed = gpu_run(KernelOptions.all_on(tabulated_filter=tables, cuda_graph=True))
    eager.step(30)
    graphed.step(30)
    assert graphed._captured is not None and graphed._captured.cuda_graph is not None
    for name, a, b in zip(eager.state._fields, eager.state, graphed.state, strict=True):
        assert torch.equal(a, b), name


@pytest.mark.gpu
@pytest.mark.parametrize("architecture", ["egnn", "painn"])
def test_egnn_and_painn_graph_replays_match_eager_steps_bitwise(architecture):
    options = dict(fused_message_passing=True, fused_pair_search=True, fused_integrator=True)
    eager = gpu_run(KernelOptions(**options), architecture=architecture)
    graphed = gpu_run(KernelOptions(cuda_graph=True, **options), architecture=architecture)
    eager.step(20)
    graphed.step(20)
    assert graphed._captured is not None and graphed._captured.cuda_graph is not None
    for name, a, b in zip(eager.state._fields, eager.state, graphed.state, strict=True):
        assert torch.equal(a, b), name


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [False, True], ids=["tables", "fused-descriptor"])
def test_deep_potential_graph_replays_follow_eager_steps(fused):
    """Captured Deep Potential steps (its tables, with or without the fused descriptor): the
    eager steps group the fitting networks' rows differently (no fixed shapes), so the
    trajectories agree to rounding, not bit for bit."""
    options = dict(tabulated_filter=True, fused_message_passing=fused, fused_pair_search=True,
                   fused_integrator=True)
    eager = gpu_run(KernelOptions(**options), architecture="dp")
    graphed = gpu_run(KernelOptions(cuda_graph=True, **options), architecture="dp")
    eager.step(20)
    graphed.step(20)
    assert graphed._captured is not None and graphed._captured.cuda_graph is not None
    for name, a, b in zip(eager.state._fields, eager.state, graphed.state, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4, msg=name)



@pytest.mark.gpu
def test_overflow_is_redone_on_the_gpu():
    eager = gpu_run(KernelOptions.all_on())
    graphed = gpu_run(KernelOptions.all_on(cuda_graph=True))
    graphed.step(1)
    eager.step(1)
    graphed._captured.slots = 64
    graphed.step(10)
    eager.step(10)
    assert graphed._captured.slots > 64
    assert torch.equal(eager.positions, graphed.positions)


@pytest.mark.gpu
def test_a_step_is_a_graph_launch_instead_of_hundreds():
    graphed = launches_per_step(gpu_run(KernelOptions.all_on(cuda_graph=True)), steps=50)
    eager = launches_per_step(gpu_run(KernelOptions.all_on()), steps=5)
    # one graph launch plus the generators' seed/offset updates per replay
    assert graphed["host_launches_per_step"] < 5.0
    assert eager["host_launches_per_step"] > 20 * graphed["host_launches_per_step"]
