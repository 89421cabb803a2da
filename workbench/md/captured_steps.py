"""Whole MD steps captured once as a CUDA graph and replayed.

One step (neighbour list, the network and priors forward and backward, the BAOAB
update, the blow-up check) is recorded into a CUDA graph and replayed, so a step
costs one graph launch from the host instead of hundreds of kernel launches and
the host synchronisations of an eager step.

What makes the step capturable:

* the neighbour list is rebuilt at every step with static shapes
  (:meth:`~workbench.neighbors.NeighborList.static_graph`: dense distance blocks
  and ``nonzero_static`` into a fixed number of slots per replica; or, with the
  ``fused_pair_search`` switch, :meth:`~workbench.neighbors.NeighborList.searched_graph`,
  Triton passes that also build the CSR layouts), so there is no rebuild decision
  on the host and no skin. Systems above ``CELL_LIST_ABOVE`` beads per replica, whose
  neighbours come from a cell list, are not captured (`captured_steps_problem`,
  decision 0022);
* the network's path has no host synchronisation: CGSchNet's on any path; CGEGNN's and
  CGPaiNN's with ``fused_message_passing`` (the only path of theirs captured);
  CGDeepPotential's with ``tabulated_filter`` or ``fused_message_passing`` (per-edge table
  rows gathered by network, or its descriptor kernel; its fitting networks grouped with
  fixed shapes under ``cuda_graph``);
* the run's random generator is registered with the graph, so each replay draws
  the numbers an eager step would have drawn (same Philox seed and offsets);
* temperatures, the step counter and the overflow counter live in device tensors
  that replays read and write in place.

Overflow never truncates silently: every step records how many slots per replica
it needed. After a chunk of replays (one host synchronisation per chunk) a count
above the capacity rolls the chunk back (state and generator), grows the
capacity and captures again. The graph is captured again, too, whenever the
kernel options, the weights, the network's convolution backend or the integrator settings
change.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from workbench.neighbors import Graph

#: Eager runs of the step before capture (Triton compilation and autotuning, lazy caches).
WARMUP_STEPS = 2
#: Capacity over the largest per-replica edge count seen (a neighbour list's static graph:
#: one replica's count moves by several per cent within a chunk).
HEADROOM = 1.25
#: Capacity over the replicas' mean edge count seen (the pair search's graph, whose slots
#: are shared by all replicas: their total moves little). Every slot costs a captured step
#: about as much as an edge (decision 0026).
SEARCHED_HEADROOM = 1.1


class DynamicState(NamedTuple):
    """What a step changes, for R replicas of n beads.

    Attributes
    ----------
    positions, velocities, forces : torch.Tensor, shape (R, n, 3), float32
        Å, Å/ps, kcal/mol/Å.
    energy : torch.Tensor, shape (R,), float32
        Potential energy, kcal/mol.
    frozen : torch.Tensor, shape (R,), bool
        Replicas stopped by the blow-up check.
    frozen_step : torch.Tensor, shape (R,), int64
        Step at which each frozen replica was stopped (-1 for live ones).
    """

    positions: torch.Tensor
    velocities: torch.Tensor
    forces: torch.Tensor
    energy: torch.Tensor
    frozen: torch.Tensor
    frozen_step: torch.Tensor


def captured_steps_problem(sim) -> str | None:
    """Why ``sim`` cannot run captured steps, or None if it can."""
    from workbench.model.architectures import fused_techniques, network_kernels
    from workbench.model.force_paths import fused_problem
    from workbench.model.fused_schnet import fused_path_problem
    from workbench.model.tensor_product import UNCAPTURED_TP_BACKENDS

    if sim.neighbor_list is not None and not sim.neighbor_list.dense:
        return sim.neighbor_list.dense_problem()
    if sim.device.type != "cuda":
        return "whole-step capture needs a CUDA device"
    if not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        return "this PyTorch cannot capture a run-owned random generator"
    if sim.potential.schnet is not None:
        return fused_path_problem(sim.potential.schnet, sim.device, sim.options)
    network, architecture = sim.potential.network, sim.potential.architecture
    if network is None:
        return None
    if "cuda_graph" not in fused_techniques(architecture):
        return f"no captured steps for {architecture} networks"
    backend = getattr(network, "backend", None)
    if architecture == "nequip" and backend in UNCAPTURED_TP_BACKENDS:
        return (f"no captured steps for nequip networks on the {backend} backend "
                f"({UNCAPTURED_TP_BACKENDS[backend]})")
    kernels = network_kernels(architecture)
    if not any(getattr(sim.options, name) for name in kernels):
        # only the fused path is checked free of host synchronisation
        return f"captured {architecture} steps need its kernels ({', '.join(kernels)})"
    return fused_problem(network, sim.device, sim.options)


class CapturedSteps:
    """Replays one captured MD step of a :class:`~workbench.md.Simulation`.

    Parameters
    ----------
    sim : Simulation
        The simulation whose state, potential, options and generator are used. Its
        state is copied into private static buffers before each chunk and copied
        back after it, so callers never see tensors that a later replay overwrites.
        On a CPU the same static-shape step runs uncaptured (how the tests check
        everything but the capture itself).
    """

    def __init__(self, sim):
        self.sim = sim
        nl = sim.neighbor_list
        self.slots = math.ceil(self._headroom() * nl.slots_needed(sim.positions)) + 1 if nl else 0
        self.cuda_graph: torch.cuda.CUDAGraph | None = None
        self._replay = None
        self.captures = 0
        self._key: tuple | None = None
        self._buffers: DynamicState | None = None
        self._graph: Graph | None = None
        device = sim.device
        self._next_step = torch.zeros((), dtype=torch.long, device=device)
        self._needed = torch.zeros((), dtype=torch.long, device=device)

    def _headroom(self) -> float:
        return SEARCHED_HEADROOM if self.sim.searches_pairs() else HEADROOM

    # -- the captured step ----------------------------------------------------------
    def _evaluate(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sim = self.sim
        graph = None
        if sim.neighbor_list is not None:
            search = sim.neighbor_list.searched_graph if sim.searches_pairs() else \
                sim.neighbor_list.static_graph
            graph, needed = search(pos, self.slots)
            torch.maximum(self._needed, needed, out=self._needed)
        self._graph = graph
        return sim.potential.energy_and_forces(pos, graph, sim.options)

    def _body(self) -> None:
        new = self.sim.integrate(self._buffers, self._next_step, self._evaluate, in_place=True)
        for buffer, value in zip(self._buffers, new, strict=True):
            if value is not buffer:  # the fused Langevin kernels wrote it in place
                buffer.copy_(value)
        self._next_step.add_(1)

    def _load(self) -> None:
        """Copy the simulation's state into the static buffers (no host sync)."""
        for buffer, value in zip(self._buffers, self.sim.state, strict=True):
            buffer.copy_(value)
        self._next_step.fill_(self.sim.step_count + 1)
        self._needed.zero_()

    def _capture_key(self) -> tuple:
        from workbench.model.fused_schnet import weights_key

        sim = self.sim
        integrator = {k: v for k, v in sim.integrator.config().items() if k != "temperature"}
        weights = weights_key(sim.potential)
        # a tensor-product network's convolution backend, switched live
        backend = getattr(sim.potential.network, "backend", None)
        return (tuple(sorted(sim.options.to_dict().items())), self.slots, weights, backend,
                tuple(sorted(integrator.items())))

    def _capture(self) -> None:
        sim = self.sim
        # row-major buffers whatever the state's strides (forces summed by autograd can come
        # out transposed), so that the fused Langevin kernels can write them in place
        self._buffers = DynamicState(
            *(t.clone(memory_format=torch.contiguous_format) for t in sim.state)
        )
        self._key = self._capture_key()
        self.captures += 1
        if sim.device.type != "cuda":
            self._replay = self._body
            return
        rng = sim.generator.get_state()
        main = torch.cuda.current_stream(sim.device)
        side = torch.cuda.Stream(sim.device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                self._load()
                self._body()
        main.wait_stream(side)
        sim.generator.set_state(rng)
        self.cuda_graph = None  # free the old graph's memory before capturing again
        # The warm-up's last neighbour graph (edge arrays and CSR layouts, ~25 bytes per
        # slot: 9 GB at 1ENH × 16,384) is not needed any more: let it go with the rest.
        self._graph = None
        # The eager warm-up's intermediates sit in the allocator's cache, where the graph's
        # private pool cannot use them: hand them back first, or a large ensemble (1ENH ×
        # 16,384) holds the step's working memory twice.
        torch.cuda.empty_cache()
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(sim.generator)
        with torch.cuda.graph(graph):
            self._body()
        self.cuda_graph = graph
        self._replay = graph.replay

    # -- running ------------------------------------------------------------------
    def advance(self, steps: int) -> None:
        """Advance the simulation by ``steps`` replays (one host sync at the end)."""
        sim = self.sim
        while True:
            if self._replay is None or self._key != self._capture_key():
                self._capture()
            rng = sim.generator.get_state()
            self._load()
            for _ in range(steps):
                self._replay()
            needed = int(self._needed)
            if needed <= self.slots:
                break
            # Edges were lost in this chunk: undo it, grow, capture again, redo.
            sim.generator.set_state(rng)
            self.slots = math.ceil(self._headroom() * needed) + 1
        sim._set_state(DynamicState(*(t.clone() for t in self._buffers)))
        sim.step_count += steps
        if self._graph is not None:
            g = self._graph
            sim.graph = Graph(g.src.clone(), g.dst.clone(), g.num_nodes, g.valid.clone(), -1,
                              sorted_pairs=g.sorted_pairs)
