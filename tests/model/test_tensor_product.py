"""CGTensorProduct (workbench.model.tensor_product): forces against finite differences, O(3)
and translation invariance, padding and out-of-cutoff edges, the configuration, the potential
and its files, and the convolution backends' switch and fallback."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

pytest.importorskip("e3nn")

from helpers import (  # noqa: E402
    INTERPRET,
    assert_padding_and_far_edges_add_nothing,
    assert_smooth_at_the_cutoff,
    energy_and_forces,
    exact_graph,
    finite_difference_forces,
    interpreter_only,
    node_energies,
    perturbed_positions,
    random_rotation,
    relative_error,
    seeded,
    tiny_system,
)

from workbench.md import LangevinIntegrator, Simulation  # noqa: E402
from workbench.model import Potential, load_potential, save_potential  # noqa: E402
from workbench.model import tensor_product as tp  # noqa: E402
from workbench.model.architectures import ARCHITECTURES, architecture_of, build_network  # noqa: E402
from workbench.model.native_priors import native_priors  # noqa: E402
from workbench.model.options import KernelOptions  # noqa: E402
from workbench.model.tensor_product import (  # noqa: E402
    CGTensorProduct,
    TensorProductConfig,
    backend_problem,
)
from workbench.neighbors import NeighborList  # noqa: E402

SMALL = {"irreps": "8x0e + 4x1o", "lmax": 2, "blocks": 2, "num_rbf": 6, "radial_width": 8,
         "cutoff": 6.0, "output_widths": [8]}


def small_nequip(seed: int = 0, dtype=torch.float64, **overrides) -> CGTensorProduct:
    """A small CGTensorProduct with a fixed seed (the global RNG left as it was)."""
    config = TensorProductConfig(**{**SMALL, **overrides})
    return seeded(lambda: CGTensorProduct(config).to(dtype), seed)


@pytest.fixture(autouse=True)
def fresh_notices(monkeypatch):
    """The fallback notices are once per process; each test starts without any shown."""
    monkeypatch.setattr(tp, "_WARNED", set())


# -- forces ----------------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [{}, {"irreps": "6x0e + 2x1o + 2x2e + 2x0o", "lmax": 3,
                                            "basis": "exp-normal", "activation": "tanh"}])
def test_forces_match_central_finite_differences(overrides):
    model = small_nequip(seed=1, **overrides)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=1)
    _, forces = energy_and_forces(model, pos)
    assert float(forces.abs().max()) > 1e-3, "forces too small for a meaningful comparison"
    reference = finite_difference_forces(lambda p: node_energies(model, p).sum(-1), pos[0])
    assert relative_error(forces[0], reference) < 1e-6


def test_envelope_makes_the_energy_smooth_at_the_cutoff():
    """Two beads: E and dE/dd go to their far values as d reaches r_c (no jump)."""
    assert_smooth_at_the_cutoff(small_nequip(seed=3), gradient_tol=1e-5)


# -- invariance --------------------------------------------------------------------------
def test_energy_invariant_and_forces_equivariant_under_rotations_and_translations():
    model = small_nequip(seed=2, irreps="6x0e + 3x1o + 2x2e", lmax=2)
    pos = perturbed_positions(replicas=3, sigma=0.3, seed=2)
    energy, forces = energy_and_forces(model, pos)
    moved = torch.stack([p @ random_rotation(seed=r).T + torch.tensor([3.0 * r, -1.0, 2.5])
                         for r, p in enumerate(pos)])
    e_moved, f_moved = energy_and_forces(model, moved)
    torch.testing.assert_close(e_moved, energy, rtol=1e-10, atol=1e-10)
    for r in range(3):
        torch.testing.assert_close(f_moved[r], forces[r] @ random_rotation(seed=r).T,
                                   rtol=1e-9, atol=1e-10)
    shifted = pos + torch.tensor([10.0, -7.0, 0.5])
    torch.testing.assert_close(energy_and_forces(model, shifted)[0], energy,
                               rtol=1e-10, atol=1e-10)
    assert float(forces.sum(1).abs().max()) < 1e-10  # no net force on a replica


def test_energy_invariant_under_reflection():
    """The energy reads the even scalars only: a mirror image has the same energy, its
    forces mirrored (pseudo-scalars 0o in the features)."""
    model = small_nequip(seed=4, irreps="6x0e + 2x0o + 3x1o + 2x1e", lmax=2)
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=3)
    energy, forces = energy_and_forces(model, pos)
    mirror = torch.tensor([-1.0, 1.0, 1.0], dtype=torch.float64)
    e_mirror, f_mirror = energy_and_forces(model, pos * mirror)
    torch.testing.assert_close(e_mirror, energy, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(f_mirror, forces * mirror, rtol=1e-9, atol=1e-10)


def test_energies_follow_a_permutation_of_replicas():
    model = small_nequip(seed=4)
    pos = perturbed_positions(replicas=3, sigma=0.4, seed=3)
    with torch.no_grad():
        per_node = node_energies(model, pos)
        order = torch.tensor([2, 0, 1])
        torch.testing.assert_close(node_energies(model, pos[order]), per_node[order],
                                   rtol=1e-12, atol=1e-12)
    assert float((per_node[0] - per_node[1]).abs().max()) > 1e-6, "replicas must differ"


# -- padding and out-of-cutoff edges -------------------------------------------------------
def test_padding_slots_and_edges_beyond_the_cutoff_contribute_nothing():
    model = small_nequip(seed=5)
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=4)
    assert_padding_and_far_edges_add_nothing(
        lambda p, graph=None: energy_and_forces(model, p, graph), pos, model.cutoff)


def test_float32_model_matches_float64():
    model = small_nequip(seed=6)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=5)
    e64, f64 = energy_and_forces(model, pos)
    e32, f32 = energy_and_forces(model.float(), pos.float())
    assert relative_error(f32.double(), f64) < 1e-5
    assert relative_error(e32.double(), e64) < 1e-5


# -- configuration -----------------------------------------------------------------------
def test_config_round_trip_and_refusals():
    config = TensorProductConfig(**SMALL, basis="exp-normal")
    assert TensorProductConfig.from_dict(config.to_dict()) == config
    assert json.loads(json.dumps(config.to_dict())) == config.to_dict()
    model = CGTensorProduct(config)
    assert model.cutoff == 6.0 and model.config.embedding_size == 25
    assert TensorProductConfig().cutoff == 10.0
    with pytest.raises(ValueError, match="unknown NequIP config keys.*radial_layers"):
        TensorProductConfig.from_dict({**config.to_dict(), "radial_layers": 3})
    with pytest.raises(ValueError, match="activation"):
        TensorProductConfig(activation="relu6")
    with pytest.raises(ValueError, match="basis"):
        CGTensorProduct(TensorProductConfig(**{**SMALL, "basis": "bessel"}))
    with pytest.raises(ValueError, match="no even scalars"):
        CGTensorProduct(TensorProductConfig(**{**SMALL, "irreps": "4x1o"}))


# -- the potential, its files and the registry ---------------------------------------------
def nequip_potential(seed: int = 11) -> Potential:
    sys = tiny_system()
    return Potential(sys.bead_types, small_nequip(seed, dtype=torch.float32),
                     native_priors(sys))


def test_registry_and_potential():
    assert ARCHITECTURES["nequip"].fused == ("fused_update", "tabulated_filter", "cuda_graph")
    assert architecture_of(small_nequip()) == "nequip"
    built = build_network("nequip", TensorProductConfig(**SMALL).to_dict())
    assert isinstance(built, CGTensorProduct) and built.config == TensorProductConfig(**SMALL)
    potential = nequip_potential()
    assert potential.architecture == "nequip" and potential.network is potential.nequip
    assert all(k.startswith(("bead_types", "nequip.", "priors."))
               for k in potential.state_dict())


def test_saved_potential_loads_identically(tmp_path):
    potential = nequip_potential()
    pos = tiny_system().native_positions[None].repeat(2, 1, 1)
    graph = exact_graph(pos, potential.cutoff)
    loaded = load_potential(save_potential(potential, tmp_path / "nequip.pt"))
    assert loaded.architecture == "nequip" and loaded.nequip.config == potential.nequip.config
    before = potential.energy_and_forces(pos, graph)
    torch.testing.assert_close(loaded.energy_and_forces(pos, graph), before, rtol=0, atol=0)


def test_potential_simulates():
    sim = Simulation(tiny_system(), nequip_potential(), LangevinIntegrator(0.002, 1.0, 300.0),
                     replicas=2, seed=1)
    sim.step(3)
    assert torch.isfinite(sim.positions).all() and not sim.frozen.any()


# -- backends -----------------------------------------------------------------------------
def test_backend_problems_name_what_is_missing(monkeypatch):
    assert backend_problem("e3nn", "cpu") is None
    for backend, package in [("openequivariance", "openequivariance"),
                             ("cuequivariance", "cuequivariance_torch")]:
        assert "CUDA device" in backend_problem(backend, "cpu")
        monkeypatch.setattr(tp.importlib.util, "find_spec", lambda name: None)
        problem = backend_problem(backend, "cuda")
        assert f"{package} is not installed" in problem and "CUDA" not in problem
        monkeypatch.undo()
    with pytest.raises(ValueError, match="unknown tensor-product backend 'e3nm'"):
        backend_problem("e3nm", "cpu")
    model = small_nequip()
    with pytest.raises(ValueError, match="unknown tensor-product backend"):
        model.backend = "flash"


@pytest.mark.parametrize("backend", ["openequivariance", "cuequivariance"])
def test_unavailable_backend_warns_once_and_runs_e3nn(backend):
    model = small_nequip(seed=7)
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=6)
    e_ref, f_ref = energy_and_forces(model, pos)
    model.backend = backend  # the switch, flipped on a live model
    with pytest.warns(RuntimeWarning, match=f"backend '{backend}' unavailable .*CUDA device.*"
                      "using the e3nn reference path") as caught:
        e, f = energy_and_forces(model, pos)
    assert len([w for w in caught if w.category is RuntimeWarning]) == 1
    assert torch.equal(e, e_ref) and torch.equal(f, f_ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the second evaluation is silent
        energy_and_forces(model, pos)
    assert model.backend == backend  # the wish is kept for a device that can serve it


def test_state_dict_does_not_depend_on_the_backend():
    a, b = small_nequip(seed=8), small_nequip(seed=8)
    b.backend = "cuequivariance"
    assert list(a.state_dict()) == list(b.state_dict())


def test_engine_kernel_options_are_ignored_with_a_notice(monkeypatch):
    from workbench.model import fused_schnet

    monkeypatch.setattr(fused_schnet, "_WARNED", set())
    model = small_nequip(seed=9)  # float64: the packed linear kernel takes float32 weights
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=7)
    e_ref, _ = energy_and_forces(model, pos)
    with pytest.warns(RuntimeWarning) as caught:
        e, _ = energy_and_forces(model, pos, options=KernelOptions.all_on(cuda_graph=True))
    assert [str(w.message) for w in caught] == [
        "fused kernels unavailable (CGTensorProduct has no fused kernels for "
        "fused_radial_basis, fused_message_passing, csr_aggregation, pair_filter); using "
        "the PyTorch reference path",
        "fused kernels unavailable (the packed linear kernel takes float32 weights); using "
        "the PyTorch reference path"]
    assert torch.equal(e, e_ref)
    with pytest.warns(RuntimeWarning, match="no fused kernels for bf16 without fused_update"):
        e, _ = energy_and_forces(model, pos, options=KernelOptions(mlp_precision="bf16"))
    assert torch.equal(e, e_ref)
    gelu = small_nequip(seed=9, dtype=torch.float32, activation="gelu")
    assert "applies tanh, silu, not gelu" in tp.fused_radial_problem(
        gelu, pos.device, KernelOptions(fused_update=True))


# -- the radial MLPs in the packed linear kernel (fused_update, mlp_precision) ---------------
def fused_case(seed: int = 13):
    """A float32 model (cutoff 4 Å: few edges for the interpreter), positions (1, n, 3)
    float64 and a fixed-capacity graph of the float32 positions with padding slots and
    candidate edges beyond the cutoff."""
    model = small_nequip(seed=seed, dtype=torch.float32, cutoff=4.0)
    pos = perturbed_positions(replicas=1, sigma=0.3, seed=seed)
    graph = NeighborList(pos.shape[1], model.cutoff, skin=1.0, capacity=1000,
                         exact=False).update(pos.float())
    assert not bool(graph.valid.all()), "needs padding slots"
    return model, pos, graph


@interpreter_only
def test_fused_radial_mlp_gives_the_reference_and_its_forces_are_the_gradient():
    """FP32 (three TF32 products): energies and forces of the reference path to 1e-5, with
    padding slots; forces against central differences of the same path's energy along
    random directions (FP32 energies, h = 0.01 Å); the packing is kept until a weight
    changes."""
    model, pos, graph = fused_case()
    fused = KernelOptions(fused_update=True)
    e_ref, f_ref = energy_and_forces(model, pos.float(), graph)
    e, f = energy_and_forces(model, pos.float(), graph, fused)
    assert relative_error(e, e_ref) < 1e-5 and relative_error(f, f_ref) < 1e-5
    directions = torch.randn(2, *pos.shape[1:], generator=torch.Generator().manual_seed(0),
                             dtype=torch.float64)
    h = 0.01
    displaced = torch.cat([pos + h * directions, pos - h * directions]).float()
    with torch.no_grad():
        energies = node_energies(model, displaced, options=fused).double().sum(-1)
    slopes = -(energies[:2] - energies[2:]) / (2 * h)
    exact = (f.double() * directions).sum((-1, -2))
    assert float((slopes - exact).abs().max()) < 2e-3 * float(exact.abs().max())
    packed = tp.packed_radial(model, "fp32")
    assert tp.packed_radial(model, "fp32") is packed
    with torch.no_grad():
        model.blocks[0].radial[0].weight.mul_(1.5)
    assert tp.packed_radial(model, "fp32") is not packed


@interpreter_only
@pytest.mark.parametrize("precision,bound", [("fp16", 1e-3), ("bf16", 1e-2)])
def test_16bit_radial_mlp_force_error_against_float64_is_bounded(precision, bound):
    """16-bit operands of the radial MLPs (channel-wise scaled weights, FP32 accumulation),
    FP32 energies and forces, against the float64 reference path (measured on this case:
    fp16 1.2e-4, bf16 1.7e-3 of the force RMS)."""
    model, pos, graph = fused_case(seed=14)
    _, f64 = energy_and_forces(small_nequip(seed=14, cutoff=4.0), pos, graph)
    options = KernelOptions(fused_update=True, mlp_precision=precision)
    e, f = energy_and_forces(model, pos.float(), graph, options)
    assert e.dtype == f.dtype == torch.float32
    assert 1e-6 < relative_error(f.double(), f64) < bound  # 16-bit did run


def test_the_captured_paths_read_nothing_on_the_host(monkeypatch):
    """What ``cuda_graph`` captures: the e3nn path and the OpenEquivariance path's layout
    (with a stand-in for its convolution), with radial MLPs or tables, run forward and
    backward on fake tensors, which refuse any data-dependent host read, over a neighbour
    list's fixed-shape graph. The CSR builders are the engine's Triton kernels (no host
    reads); here their PyTorch reference, which fake tensors can run."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    import kernels

    for builder in ("build_csr", "build_csr_sorted_pairs"):
        monkeypatch.setattr(kernels, builder, kernels.build_csr_reference)
    monkeypatch.setattr(tp, "backend_problem", lambda name, device: None)
    monkeypatch.setattr(tp, "_accelerated", lambda block, name, x: OEQPlain(block))
    model = small_nequip(seed=15, dtype=torch.float32)
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=15, dtype=torch.float32)
    graph, needed = NeighborList(pos.shape[1], model.cutoff).static_graph(pos, 1600)
    assert int(needed) < 1600  # every edge has a slot, some slots are padding

    def energy_and_grad(options=None):
        p = pos.reshape(-1, 3).clone().requires_grad_()
        energy = model(p, tiny_system().bead_types.repeat(2), graph, options).sum()
        return energy, torch.autograd.grad(energy, p)[0]

    # the tables in PyTorch (the interpreter's kernels cannot read fake tensors; the table
    # read kernel's captured path: tests/model/test_tensor_product_gpu.py)
    monkeypatch.setattr(tp, "fused_radial_problem", lambda *args: "fake tensors")
    tables = KernelOptions(tabulated_filter=True)
    energy_and_grad(tables)  # the tables are built before capture, as by the warm-up steps
    for backend in ("e3nn", "openequivariance"):
        model.backend = backend
        for options in (None, tables):
            with FakeTensorMode(allow_non_fake_inputs=True):
                energy_and_grad(options)
    with pytest.raises(Exception, match="local_scalar_dense"), \
            FakeTensorMode(allow_non_fake_inputs=True):
        int(pos.sum())  # a host read is caught


def test_cuequivariance_convolution_matches_e3nn_on_the_cpu():
    """cuEquivariance's PyTorch ("naive") method runs on the CPU: the same weights, the same
    convolution as e3nn's, to float32 rounding of its coefficients."""
    pytest.importorskip("cuequivariance_torch")
    model = small_nequip(seed=10, irreps="6x0e + 2x0o + 3x1o + 2x2e", lmax=3)
    gen = torch.Generator().manual_seed(0)
    n, e = 7, 24
    src = torch.randint(0, n, (e,), generator=gen)
    dst = torch.randint(0, n, (e,), generator=gen)
    for block in model.blocks:
        x = torch.randn(n, block.irreps_in.dim, generator=gen, dtype=torch.float64)
        sh = torch.randn(e, block.irreps_sh.dim, generator=gen, dtype=torch.float64)
        w = torch.randn(e, block.tp.weight_numel, generator=gen, dtype=torch.float64)
        ref = block.convolution(x, sh, w, src, dst)
        out = tp.cue_convolution(block, x, sh, w, src, dst, method="naive")
        assert relative_error(out, ref) < 1e-6


class OEQPlain:
    """``oeq.TensorProductConv(...).forward`` in e3nn, without checks: the deterministic
    convolution's result over the destination-sorted layout."""

    def __init__(self, block):
        self.block = block

    def forward(self, X, Y, W, rows, cols, sender_perm):
        messages = self.block.tp(X[cols], Y, W)
        return X.new_zeros(X.shape[0], messages.shape[1]).index_add_(0, rows, messages)


class OEQStandIn(OEQPlain):
    """``oeq.TensorProductConv(problem, deterministic=True)`` in e3nn, checking what the
    deterministic algorithm asks of its inputs: rows sorted, ``sender_perm`` a permutation
    that puts the columns in order, every index inside the padded node range."""

    def __init__(self, block):
        super().__init__(block)
        self.calls = 0

    def forward(self, X, Y, W, rows, cols, sender_perm):
        edges = rows.shape[0]
        assert Y.shape[0] == W.shape[0] == cols.shape[0] == sender_perm.shape[0] == edges
        assert bool((rows[1:] >= rows[:-1]).all()), "rows must be sorted"
        assert torch.equal(torch.sort(sender_perm).values, torch.arange(edges))
        assert bool((cols[sender_perm][1:] >= cols[sender_perm][:-1]).all())
        assert int(rows.max()) < X.shape[0] and int(cols.max()) < X.shape[0]
        self.calls += 1
        return super().forward(X, Y, W, rows, cols, sender_perm)


@interpreter_only
@pytest.mark.parametrize("backend", ["openequivariance", "cuequivariance"])
def test_accelerated_paths_give_the_reference_through_the_whole_model(backend, monkeypatch):
    """The wiring around the libraries' operations on the CPU: OpenEquivariance's inputs
    from the engine's CSR layout (exact graph, candidate edges beyond the cutoff, padding
    slots) into a stand-in of its fused convolution; cuEquivariance's own PyTorch method;
    with the radial MLPs and with the radial tables."""
    if backend == "cuequivariance":
        pytest.importorskip("cuequivariance_torch")
        accelerated = tp._accelerated
        monkeypatch.setattr(tp, "_accelerated", lambda block, name, x, method=None:
                            accelerated(block, name, x, method="naive"))
    else:
        stand_ins = {}
        monkeypatch.setattr(tp, "_accelerated", lambda block, name, x:
                            stand_ins.setdefault(id(block), OEQStandIn(block)))
    monkeypatch.setattr(tp, "backend_problem", lambda name, device: None)
    model = small_nequip(seed=12)
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=8)
    n = pos.shape[1]
    searched, needed = NeighborList(n, model.cutoff).searched_graph(pos.float(), 1400)
    assert int(needed) < 1400  # every edge has a slot, some slots are padding
    graphs = [exact_graph(pos, model.cutoff),
              NeighborList(n, model.cutoff, skin=1.5).update(pos, exact=False),
              NeighborList(n, model.cutoff, skin=1.5, capacity=8000).update(pos),
              searched]
    assert not bool(graphs[2].valid.all()), "needs padding slots"
    # the radial MLPs, and the radial tables (their reads permuted into the CSR layout with
    # the spherical harmonics for OpenEquivariance)
    radial = [None, KernelOptions(tabulated_filter=True)]
    for graph in graphs:
        for options in radial:
            model.backend = "e3nn"
            e_ref, f_ref = energy_and_forces(model, pos, graph, options)
            model.backend = backend
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                e, f = energy_and_forces(model, pos, graph, options)
            assert relative_error(e, e_ref) < 1e-6 and relative_error(f, f_ref) < 1e-6
    if backend == "openequivariance":
        calls = len(graphs) * len(radial)
        assert [s.calls for s in stand_ins.values()] == [calls] * len(model.blocks)


def test_the_conv_layout_spreads_the_padding_over_short_pad_rows():
    """OpenEquivariance's deterministic kernels add up a row's partial sums serially: the
    padding slots go to pad nodes ``N, N + 1, …``, ``PAD_ROW_EDGES`` to each, in the
    destination order and, through ``sender_perm``, in the source order; real edges keep
    their rows; a searched graph (already destination-sorted) is used without a permutation."""
    model = small_nequip(seed=12, dtype=torch.float32)
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=8, dtype=torch.float32)
    n_total = pos.shape[0] * pos.shape[1]
    nl = NeighborList(pos.shape[1], model.cutoff, skin=1.5, capacity=8000)
    graphs = {"candidates": nl.update(pos)}
    if INTERPRET:  # Triton's interpreter: the pair search runs
        graphs["searched"] = NeighborList(pos.shape[1], model.cutoff).searched_graph(pos, 2000)[0]
    flat = pos.reshape(-1, 3)
    for name, graph in graphs.items():
        layout = tp.conv_layout(model, flat, graph)
        edges = graph.src.numel()
        assert (layout.perm is None) == (name == "searched")
        assert layout.num_nodes == n_total and layout.pad_nodes == -(-edges // tp.PAD_ROW_EDGES)
        real = layout.rows < n_total
        padding = int((~real).sum())
        assert padding > 2 * tp.PAD_ROW_EDGES, "needs padding for several pad rows"
        assert bool((layout.rows[1:] >= layout.rows[:-1]).all())
        by_source = layout.cols[layout.sender_perm]
        assert bool((by_source[1:] >= by_source[:-1]).all())
        assert torch.equal(torch.sort(layout.sender_perm).values, torch.arange(edges))
        assert torch.equal(real, layout.cols < n_total)  # padding at pad nodes at both ends
        for ends in (layout.rows, layout.cols):
            per_node = torch.bincount(ends, minlength=n_total + layout.pad_nodes)
            assert int(per_node[n_total:].max()) == tp.PAD_ROW_EDGES
            assert ends.max() < n_total + layout.pad_nodes
        # the real edges are the graph's edges within the cutoff, each once
        perm = torch.arange(edges) if layout.perm is None else layout.perm
        src, dst = graph.src[perm], graph.dst[perm]
        ends = (src < n_total) & (dst < n_total)
        d = (flat[dst.clamp(max=n_total - 1)] - flat[src.clamp(max=n_total - 1)]).norm(dim=-1)
        inside = ends & (d < model.cutoff)
        if graph.valid is not None:
            inside &= graph.valid[perm]
        assert torch.equal(real, inside)
        assert torch.equal(layout.rows[real], dst[real])
        assert torch.equal(layout.cols[real], src[real])
