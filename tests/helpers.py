"""Shared helpers of the model, neighbour-list, MD, CLI and distributed tests.

Importable as ``helpers`` from every test module (pytest puts ``tests/`` on the path).
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable

import pytest
import torch

from kernels._triton import INTERPRET
from workbench.distributed.shards import build_shard, split_replicas
from workbench.model import CGSchNet, HarmonicBonds, Potential, SchNetConfig
from workbench.model.native_priors import native_priors
from workbench.neighbors import Graph, NeighborList
from workbench.runner import RunSettings
from workbench.system import build_system
from workbench.system.cg_system import CGSystem

#: Small SchNet sizes that keep CPU tests fast.
SMALL_SCHNET = {"hidden": 16, "filters": 16, "blocks": 2, "num_rbf": 8, "cutoff": 6.0}


# -- systems and potentials --------------------------------------------------------------
@functools.cache
def system(name: str = "cln025") -> CGSystem:
    """A bundled protein's CG system, built once per session (do not mutate its tensors)."""
    return build_system(name)


#: For tests that run the Triton kernels on CPU tensors: only the interpreter does that (a
#: GPU machine launches no kernel on CPU tensors; the GPU versions are marked ``gpu``).
#: For tests of the tensor-product network (the ``equivariant`` extra, e3nn).
needs_e3nn = pytest.mark.skipif(importlib.util.find_spec("e3nn") is None,
                                reason="needs e3nn (pip install 'cg-workbench[equivariant]')")

interpreter_only = pytest.mark.skipif(
    not INTERPRET, reason="runs Triton kernels on CPU tensors, which needs TRITON_INTERPRET=1"
)


def _deepmd_problem() -> str | None:
    try:
        import deepmd.pt.model.model  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - missing, or a binary op built for another torch
        return f"{type(exc).__name__}: {exc}"
    return None


DEEPMD_PROBLEM = _deepmd_problem()
#: For tests of deepmd-kit's models (the ``deepmd`` extra, deepmd-kit's PyTorch backend).
needs_deepmd = pytest.mark.skipif(
    DEEPMD_PROBLEM is not None,
    reason=f"needs deepmd-kit's PyTorch backend (pip install 'cg-workbench[deepmd]'; see "
           f"docs/deep-potential.md): {DEEPMD_PROBLEM}")


def tiny_system() -> CGSystem:
    """The smallest bundled system: CLN025, 10 residues, 49 beads."""
    return system("cln025")


def small_config(**overrides) -> SchNetConfig:
    """A small :class:`SchNetConfig` (hidden 16, filters 16, 2 blocks, 8 RBF, 6 Å)."""
    return SchNetConfig(**{**SMALL_SCHNET, **overrides})


def seeded(build: Callable, seed: int):
    """``build()`` under ``torch.manual_seed(seed)``, the global RNG left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def small_schnet(seed: int = 0, **overrides) -> CGSchNet:
    """A randomly initialised small CGSchNet (fixed seed, global RNG left as it was)."""
    return seeded(lambda: CGSchNet(small_config(**overrides)), seed)


def schnet_potential(
    sys: CGSystem | None = None, seed: int = 0, priors: bool = True, **overrides
) -> Potential:
    """Small SchNet (plus the native priors unless ``priors=False``) for ``sys``."""
    sys = sys or tiny_system()
    terms = native_priors(sys) if priors else None
    return Potential(sys.bead_types, small_schnet(seed, **overrides), terms)


def prior_potential(sys: CGSystem | None = None, terms: tuple[str, ...] | None = None) -> Potential:
    """Prior-only potential from :func:`native_priors`, optionally only the named terms."""
    sys = sys or tiny_system()
    priors = native_priors(sys)
    if terms is not None:
        priors = {k: v for k, v in priors.items() if k in terms}
    return Potential(sys.bead_types, None, priors)


def bonds_only_potential(sys: CGSystem | None = None) -> Potential:
    """A purely harmonic potential: the native bonds of ``sys`` and nothing else."""
    sys = sys or tiny_system()
    bonds = native_priors(sys)["bonds"]
    assert isinstance(bonds, HarmonicBonds)
    return Potential(sys.bead_types, None, {"bonds": bonds})


def assert_padding_and_far_edges_add_nothing(energy_and_forces: Callable, pos: torch.Tensor,
                                             cutoff: float) -> None:
    """A network's energies and forces on ``pos`` (R, n, 3) are the same on the exact graph,
    on a candidate graph with edges beyond ``cutoff`` and on a fixed-capacity graph with
    padding slots (``energy_and_forces(pos, graph=None) -> (energy, forces)``)."""
    n = pos.shape[1]
    e_exact, f_exact = energy_and_forces(pos)
    candidates = NeighborList(n, cutoff, skin=1.5).update(pos, exact=False)
    capacity = NeighborList(n, cutoff, skin=1.5, capacity=8000).update(pos)
    assert capacity.valid is not None and not bool(capacity.valid.all()), "needs padding"
    d = (pos.reshape(-1, 3)[candidates.dst] - pos.reshape(-1, 3)[candidates.src]).norm(dim=-1)
    assert bool((d >= cutoff).any()), "needs candidate edges beyond the cutoff"
    for graph in (candidates, capacity):
        e, f = energy_and_forces(pos, graph)
        torch.testing.assert_close(e, e_exact, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(f, f_exact, rtol=1e-12, atol=1e-12)


# -- coordinates --------------------------------------------------------------------------
def perturbed_positions(
    sys: CGSystem | None = None,
    replicas: int = 2,
    sigma: float = 0.2,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Native structure plus Gaussian noise of ``sigma`` Å per coordinate, ``(R, n, 3)``."""
    sys = sys or tiny_system()
    gen = torch.Generator().manual_seed(seed)
    native = sys.native_positions.to(torch.float64)
    noise = sigma * torch.randn((replicas, *native.shape), generator=gen, dtype=torch.float64)
    return (native[None] + noise).to(dtype)


def random_cloud(
    replicas: int, n: int, box: float = 14.0, seed: int = 0, dtype=torch.float64
) -> torch.Tensor:
    """Uniform random points in a cube of side ``box`` Å, ``(R, n, 3)``."""
    gen = torch.Generator().manual_seed(seed)
    return box * torch.rand((replicas, n, 3), generator=gen, dtype=torch.float64).to(dtype)


def random_rotation(seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    """A proper rotation matrix (det +1) drawn from a seeded QR decomposition."""
    gen = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))[None, :]
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q.to(dtype)


# -- graphs -------------------------------------------------------------------------------
def exact_graph(pos: torch.Tensor, cutoff: float, **kwargs) -> Graph:
    """Exact SchNet graph of ``pos`` (R, n, 3), built afresh (no skin)."""
    return NeighborList(pos.shape[1], cutoff, skin=0.0, **kwargs).update(pos)


def energy_function(potential: Potential) -> Callable[[torch.Tensor], torch.Tensor]:
    """``pos (R, n, 3) -> energy (R,)``, with an exact graph built for every call."""

    def energy(pos: torch.Tensor) -> torch.Tensor:
        graph = exact_graph(pos, potential.cutoff) if potential.network is not None else None
        return potential.energy(pos, graph)

    return energy


def edge_set(graph: Graph) -> set[tuple[int, int]]:
    """The (src, dst) pairs of a graph's valid slots."""
    src, dst = graph.src, graph.dst
    if graph.valid is not None:
        src, dst = src[graph.valid], dst[graph.valid]
    return set(zip(src.tolist(), dst.tolist(), strict=True))


def brute_force_edges(
    pos: torch.Tensor, cutoff: float, exclusions: torch.Tensor | None = None
) -> set[tuple[int, int]]:
    """Every directed pair (src, dst) of flattened beads with ``d < cutoff``, by loops.

    Same replica only, no self pairs, excluded pairs (either order) left out.
    """
    replicas, n, _ = pos.shape
    excluded = set()
    if exclusions is not None:
        for i, j in torch.as_tensor(exclusions).reshape(-1, 2).tolist():
            excluded |= {(i, j), (j, i)}
    edges = set()
    pos = pos.to(torch.float64)
    for r in range(replicas):
        d = torch.cdist(pos[r], pos[r])
        for i, j in torch.nonzero(d < cutoff).tolist():
            if i != j and (j, i) not in excluded:
                edges.add((r * n + j, r * n + i))
    return edges


# -- derivatives --------------------------------------------------------------------------
def finite_difference_forces(
    energy_fn: Callable[[torch.Tensor], torch.Tensor], pos: torch.Tensor, h: float = 1e-5
) -> torch.Tensor:
    """Central-difference forces ``−∂E/∂x`` of one configuration.

    Parameters
    ----------
    energy_fn : callable
        Maps positions ``(B, n, 3)`` to energies ``(B,)``; every displaced copy is
        evaluated as one replica of a single batch.
    pos : torch.Tensor, shape (n, 3), float64
    h : float
        Displacement, Å.

    Returns
    -------
    torch.Tensor, shape (n, 3), float64
    """
    assert pos.dtype == torch.float64, "finite differences need float64"
    n = pos.shape[0]
    step = h * torch.eye(3 * n, dtype=torch.float64).reshape(3 * n, n, 3)
    with torch.no_grad():
        energies = energy_fn(torch.cat([pos[None] + step, pos[None] - step]))
    return -((energies[: 3 * n] - energies[3 * n :]) / (2 * h)).reshape(n, 3)


def autograd_forces(
    energy_fn: Callable[[torch.Tensor], torch.Tensor], pos: torch.Tensor
) -> torch.Tensor:
    """``−∂ΣE/∂x`` by torch.autograd, shape of ``pos``."""
    pos = pos.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(energy_fn(pos).sum(), pos)
    return -grad


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """``‖approx − exact‖ / ‖exact‖`` (Frobenius norms)."""
    approx, exact = approx.detach(), exact.detach()
    norm = float(torch.linalg.vector_norm(exact))
    assert norm > 0 and math.isfinite(norm), "reference must be non-zero and finite"
    return float(torch.linalg.vector_norm(approx - exact)) / norm


# -- statistics ---------------------------------------------------------------------------
def block_standard_error(series: torch.Tensor, blocks: int = 20) -> float:
    """Standard error of the mean of a correlated series (T,) by block averaging."""
    usable = series[: len(series) // blocks * blocks].reshape(blocks, -1).mean(1)
    return float(usable.std() / math.sqrt(blocks))


# -- run folders --------------------------------------------------------------------------
def record_run(folder, replicas: int = 3, steps: int = 12, every: int = 2):
    """Run ``workbench run`` on CLN025 with a small SchNet (6 Å) and priors into ``folder``
    (trajectory frame and metrics row every ``every`` steps, CPU, quiet); returns it."""
    import contextlib
    import io
    from pathlib import Path

    from workbench.cli import main
    from workbench.model import save_potential

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    model = save_potential(schnet_potential(), folder.parent / f"{folder.name}.model.pt")
    with contextlib.redirect_stdout(io.StringIO()):
        code = main([
            "run", "--protein", "cln025", "--model", str(model), "--replicas", str(replicas),
            "--steps", str(steps), "--save-interval", str(every), "--device", "cpu",
            "--quiet", "--out", str(folder),
        ])
    assert code == 0, f"workbench run exited with {code}"
    return folder


# -- sharded runs: the reference of the distributed tests ------------------------------
def run_shards_directly(settings: RunSettings, shards: int, on_report=None):
    """Each shard's simulation built and stepped in this process (the reference).

    Returns the simulations, shard 0 first; ``on_report(sims)`` is called at every report
    step (``settings.steps`` must be a multiple of ``settings.save_interval``).
    """
    sims = [
        build_shard(settings, s, "cpu").simulation
        for s in split_replicas(settings.replicas, shards)
    ]
    for _ in range(settings.steps // settings.save_interval):
        for sim in sims:
            sim.step(settings.save_interval)
        if on_report is not None:
            on_report(sims)
    return sims


def concatenated(sims, name: str) -> torch.Tensor:
    """An attribute of every simulation, concatenated over the replica axis."""
    return torch.cat([getattr(sim, name) for sim in sims])


def assert_smooth_at_the_cutoff(model, gradient_tol: float) -> None:
    """Two beads of types 1 and 2 (float64 positions): a network's energy and its
    gradient reach their far values as the pair distance reaches ``model.cutoff`` (no
    jump): zero gradient beyond, energy within 1e-9 and gradient norm below
    ``gradient_tol`` just inside."""
    types = torch.tensor([1, 2])

    def pair(d):
        pos = torch.tensor([[0.0, 0.0, 0.0], [d, 0.3 * d, 0.0]], dtype=torch.float64,
                           requires_grad=True)
        graph = NeighborList(2, model.cutoff, skin=1.0).update(pos[None].detach(), exact=False)
        e = model(pos, types, graph).sum()
        (grad,) = torch.autograd.grad(e, pos)
        return float(e.detach()), float(grad[1].norm())

    scale = (1 + 0.3**2) ** 0.5
    far_e, far_g = pair((model.cutoff + 0.5) / scale)
    assert far_g == 0.0
    near_e, near_g = pair((model.cutoff - 1e-5) / scale)
    assert abs(near_e - far_e) < 1e-9 and near_g < gradient_tol


def node_energies(model, pos, graph=None, options=None):
    """A network's per-node energies ``(R, n)`` of CLN025 positions ``(R, n, 3)`` (the exact
    graph unless given)."""
    replicas, n, _ = pos.shape
    types = tiny_system().bead_types.repeat(replicas)
    graph = exact_graph(pos, model.cutoff) if graph is None else graph
    return model(pos.reshape(-1, 3), types, graph, options).reshape(replicas, n)


def energy_and_forces(model, pos, graph=None, options=None):
    """A network's energies ``(R,)`` and forces ``−∂E/∂r`` ``(R, n, 3)`` (`node_energies`)."""
    pos = pos.detach().clone().requires_grad_()
    energy = node_energies(model, pos, graph, options).sum(-1)
    (grad,) = torch.autograd.grad(energy.sum(), pos)
    return energy.detach(), -grad


def gpu_force_error(model: torch.nn.Module, options, replicas: int = 16) -> float:
    """Relative RMS force error of ``model`` with ``options`` against the same model in
    float64, on the GPU at the benchmarks' shape: 1ENH × ``replicas``, native positions
    plus 0.3 Å of noise (seed 0). A RuntimeWarning, the sign of a fallback, fails the test:
    a path that did not run would test nothing."""
    import warnings

    from benchmarks.bench_egnn import forces, rel_rms

    torch.manual_seed(0)
    sys = build_system("1enh")
    model = model.cuda()
    native = sys.native_positions.to(device="cuda", dtype=torch.float32)
    pos = (native[None] + 0.3 * torch.randn(replicas, *native.shape, device="cuda")).reshape(
        -1, 3)
    graph = NeighborList(sys.n_beads, model.cutoff, skin=0.0).update(
        pos.reshape(replicas, -1, 3))
    types = sys.bead_types.cuda().repeat(replicas)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _, f = forces(model, pos, types, graph, options)
    _, f64 = forces(model.double(), pos.double(), types, graph)
    return rel_rms(f, f64)

