"""Neighbour lists: a batched Verlet neighbour list for many replicas of one molecule.

Pairs are found by dense distance blocks, chunked over replicas so that at most
``max_block`` pair distances are held at once (CG proteins have hundreds of
beads, where dense blocks beat cell lists on a GPU). Above `CELL_LIST_ABOVE` beads per
replica (a large system: many copies of a protein, `workbench.system.copies`) the
candidates come from a cell list instead (:func:`cell_list_pairs`), the same pairs in
the same order with memory linear in the beads. A candidate list within
``cutoff + skin`` is rebuilt when any bead has moved more than half the skin
since the last build. Edges never cross replicas and never join a bead to
itself; they are sorted by destination.

Two output modes:

* exact (``capacity=None``): every call returns the edges with ``d < cutoff``
  (or the whole candidate list with ``exact=False``), with data-dependent size.
* fixed capacity (``capacity=C``): the candidate list lives in arrays of static
  length C; unused slots have ``src = dst = N`` (a padding node one past the
  last bead) and ``valid = False``. More candidates than C raise
  :class:`NeighborListOverflow`, with the count needed, so the caller can grow
  the capacity; nothing is truncated silently.

For a captured CUDA-graph step, :meth:`NeighborList.static_graph` builds the pairs
within the cutoff afresh at every call into static arrays (a fixed number of slots
per replica) and returns, as a device tensor, how many slots it needed, so the
caller can detect an overflow after the fact without a host synchronisation.
:meth:`NeighborList.searched_graph` does the same with the Triton pair search
(`kernels.pair_search_csr`), which also builds both CSR layouts. Both need the dense
search and refuse a list that uses the cell list (:meth:`NeighborList.dense_problem`):
rebuilt at every step, a cell list costs more than the launches a captured step saves
(decision 0022).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

#: Å beyond the cutoff searched by :meth:`NeighborList.static_graph` (absorbs rounding
#: differences between the build's and the force evaluation's distance arithmetic).
FIXED_MARGIN = 0.05

#: Beads per replica above which the candidates come from the cell list. Dense search
#: holds an n × n allowed-pair mask (1 byte a pair) and at least one replica's n × n
#: distance block (about 17 bytes a pair with the differences): at 4,096 beads 16.8 M pairs,
#: about 0.3 GB, twice the default ``max_block``; at 100,000 beads 10¹⁰ pairs, 170 GB. Every
#: bundled protein (at most 360 beads) and every mlcg system stays well below and keeps the
#: dense search and the Triton pair search.
CELL_LIST_ABOVE = 4096
#: Å added to the search radius for the cell edge, so that float rounding in binning can
#: never put two beads within the radius two cells apart.
CELL_MARGIN = 0.01
#: Largest number of cells per bead: a cell edge is grown beyond the radius (which only
#: adds candidates) when the bounding box would need more.
CELLS_PER_BEAD = 8
#: The 27 cell offsets of a cell's neighbourhood (itself included), shape (27, 3).
_NEIGHBOUR_CELLS = torch.cartesian_prod(*[torch.tensor([-1, 0, 1])] * 3)


def _cell_number(cell3: torch.Tensor, dims: torch.Tensor) -> torch.Tensor:
    """Row-major number of cells ``(..., 3)`` int64 in a grid of ``dims`` cells."""
    return (cell3[..., 0] * dims[1] + cell3[..., 1]) * dims[2] + cell3[..., 2]


@dataclass(frozen=True)
class CellGrid:
    """Cubic cells over a box: cell ``(a, b, c)`` covers ``origin + edge·[a, a+1) × …``.

    Beads outside the box are counted in the nearest border cell (binning is monotone,
    so beads within ``edge`` of each other stay in the same or neighbouring cells).

    Attributes
    ----------
    origin : torch.Tensor, shape (3,), float32
        Å.
    edge : float
        Å, at least the search radius.
    dims : torch.Tensor, shape (3,), int64
        Cells along x, y, z.
    offsets : torch.Tensor, shape (27, 3), int64
        The cell offsets of a neighbourhood, on the grid's device (nothing is copied to
        the device inside a captured step).
    count : int
        Number of cells, the product of ``dims``, kept on the host (reading it from
        ``dims`` would synchronise with the device).
    """

    origin: torch.Tensor
    edge: float
    dims: torch.Tensor
    offsets: torch.Tensor
    count: int

    @classmethod
    def around(cls, pos: torch.Tensor, radius: float) -> CellGrid:
        """Cells of edge ``radius + CELL_MARGIN`` (grown while there would be more than
        `CELLS_PER_BEAD` per bead) over the bounding box of ``pos`` (``(..., 3)``) (host
        synchronisation)."""
        flat = pos.reshape(-1, 3)
        low = flat.amin(0)
        span = (flat.amax(0) - low).tolist()
        edge = radius + CELL_MARGIN
        while math.prod(int(x / edge) + 1 for x in span) > CELLS_PER_BEAD * len(flat) + 27:
            edge *= 1.25
        shape = [int(x / edge) + 1 for x in span]
        return cls(low, edge, torch.tensor(shape, device=pos.device),
                   _NEIGHBOUR_CELLS.to(pos.device), math.prod(shape))

    def cells(self, pos: torch.Tensor) -> torch.Tensor:
        """Cell ``(a, b, c)`` of each bead ``(..., 3)``, int64 (no host synchronisation)."""
        cell3 = ((pos - self.origin) / self.edge).floor().long()
        return torch.minimum(cell3.clamp(min=0), self.dims - 1)

    def neighbourhood(self, cell3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Numbers of the 27 cells around each cell ``(m, 3)``, shape (m, 27) int64 (0 where
        outside the grid), and which are inside, shape (m, 27) bool."""
        around = cell3[:, None, :] + self.offsets
        inside = ((around >= 0) & (around < self.dims)).all(-1)
        return _cell_number(torch.where(inside[..., None], around, 0), self.dims), inside


def cell_list_pairs(
    pos: torch.Tensor, radius: float, excluded: torch.Tensor | None = None,
    max_block: int = 1 << 23,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All pairs of one replica within ``radius``, from a cell list.

    Beads are binned into cubic cells of edge at least ``radius`` (plus `CELL_MARGIN`)
    over their bounding box and sorted by cell; each bead's candidates are the beads of
    its own and the 26 neighbouring cells, generated for consecutive ranges of beads
    holding at most ``max_block`` candidates at a time. A pair is kept when
    ``((pos[i] - pos[j]) ** 2).sum() < radius ** 2`` in float32, the dense search's test,
    so both give the same pairs.

    Parameters
    ----------
    pos : torch.Tensor, shape (n, 3), float32
        Finite positions, Å.
    radius : float
        Å.
    excluded : torch.Tensor, shape (X,), int64, optional
        Sorted keys ``i * n + j`` of ordered pairs never returned.
    max_block : int
        Largest number of candidate pairs held at once (one bead's candidates are always
        taken together).

    Returns
    -------
    src, dst : torch.Tensor, shape (E,), int64
        Edges ``src → dst`` with ``src != dst``, sorted by ``(dst, src)``; ``j → i`` is an
        edge exactly when ``i → j`` is.

    Raises
    ------
    ValueError
        Non-finite positions.
    """
    n = pos.shape[0]
    if not bool(torch.isfinite(pos).all()):
        raise ValueError("cell-list search: positions contain NaN or infinite coordinates")
    grid = CellGrid.around(pos, radius)
    cell3 = grid.cells(pos)
    cell = _cell_number(cell3, grid.dims)
    counts = torch.bincount(cell, minlength=grid.count)
    starts = counts.cumsum(0) - counts
    order = torch.argsort(cell, stable=True)
    around, inside = grid.neighbourhood(cell3)
    found = torch.where(inside, counts[around], 0)  # candidates per (bead, cell)
    per_bead = found.sum(1).cumsum(0).cpu()
    srcs, dsts = [], []
    first = 0
    while first < n:
        done = int(per_bead[first - 1]) if first else 0
        last = max(first + 1, int(torch.searchsorted(per_bead, done + max_block, right=True)))
        runs = found[first:last].reshape(-1)
        total = int(per_bead[last - 1]) - done
        run = torch.repeat_interleave(torch.arange(runs.numel(), device=pos.device), runs,
                                      output_size=total)
        offset = torch.arange(total, device=pos.device) - (runs.cumsum(0) - runs)[run]
        src = order[starts[around[first:last].reshape(-1)][run] + offset]
        dst = first + torch.div(run, 27, rounding_mode="floor")
        diff = pos[dst] - pos[src]
        keep = ((diff * diff).sum(-1) < radius * radius) & (src != dst)
        key = torch.sort(dst[keep] * n + src[keep]).values
        if excluded is not None and excluded.numel():
            at = torch.searchsorted(excluded, key).clamp_(max=excluded.numel() - 1)
            key = key[excluded[at] != key]
        dsts.append(torch.div(key, n, rounding_mode="floor"))
        srcs.append(key % n)
        first = last
    return torch.cat(srcs), torch.cat(dsts)


class NeighborListOverflow(RuntimeError):
    """More candidate edges than the fixed capacity.

    Attributes
    ----------
    needed : int
        Number of candidate edges found.
    capacity : int
        Capacity that was exceeded.
    """

    def __init__(self, needed: int, capacity: int):
        super().__init__(
            f"neighbour list overflow: {needed} candidate edges for a capacity of {capacity}"
        )
        self.needed = needed
        self.capacity = capacity


@dataclass
class Graph:
    """Directed edges over flattened beads ``g = replica * n + i``.

    Attributes
    ----------
    src, dst : torch.Tensor, shape (E,), int64
        Message from ``src`` into ``dst``; sorted by ``dst`` (valid edges).
    num_nodes : int
        ``R * n``; padding slots point at node ``num_nodes``.
    valid : torch.Tensor or None, shape (E,), bool
        Fixed-capacity mode: which slots hold an edge. None when all do.
    version : int
        Incremented whenever the edge arrays change, so derived layouts (CSR)
        can be cached per version.
    sorted_pairs : bool
        The valid edges are sorted by ``(dst, src)`` and ``j → i`` is one exactly when
        ``i → j`` is (every graph a :class:`NeighborList` returns); CSR layouts can then
        be built without atomics (``kernels.build_csr_sorted_pairs``).
    csr : kernels.GraphCSR or None
        Both CSR layouts of the valid edges, when they are exactly the pairs with
        ``d < cutoff`` as the message-passing kernels measure ``d`` (from
        :meth:`NeighborList.searched_graph`); the force evaluation then builds none.
    cutoff : float or None
        The radius of ``csr``'s edges (Å).
    """

    src: torch.Tensor
    dst: torch.Tensor
    num_nodes: int
    valid: torch.Tensor | None = None
    version: int = 0
    sorted_pairs: bool = False
    csr: object | None = None
    cutoff: float | None = None

    @property
    def num_edges(self) -> int:
        """Number of slots E (equal to the edge count when ``valid`` is None)."""
        return int(self.src.shape[0])


def without_empty_slots(graph: Graph) -> Graph:
    """``graph`` with only the slots that hold an edge, in their order (one host
    synchronisation: for eager steps, never inside a captured one).

    Paths that evaluate every slot (the reference networks) then do the work of the edges
    only: evaluated on every slot of the pair search's fixed-capacity graph, CGEGNN's and
    CGPaiNN's reference paths made `fused_pair_search` alone slower than the Verlet list
    (1ENH × 64, H200: 989 and 402 against 1,657 and 604 timestep·mol/s). The CSR layouts
    are dropped (they index the slots).

    Parameters
    ----------
    graph : Graph
        With ``valid`` set (a graph without it is returned as it is).

    Returns
    -------
    Graph
        ``valid`` None, ``csr`` None, ``version`` -1 (never cached by version).
    """
    if graph.valid is None:
        return graph
    keep = graph.valid.nonzero().squeeze(1)
    return Graph(graph.src[keep], graph.dst[keep], graph.num_nodes, None, -1,
                 sorted_pairs=graph.sorted_pairs)


class NeighborList:
    """Verlet neighbour list over replicas.

    Parameters
    ----------
    n_beads : int
        Beads per replica n.
    cutoff : float
        Interaction radius r_c, Å; an edge has ``d < cutoff``.
    skin : float
        Verlet skin, Å (0 rebuilds at every call).
    exclusions : torch.Tensor, shape (P, 2), int64, optional
        Bead pairs (within one molecule) never joined by an edge.
    capacity : int, optional
        Fixed number of edge slots over all replicas (fixed-capacity mode).
    exact : bool
        Exact mode only: return edges within ``cutoff`` (True) or the whole
        candidate list within ``cutoff + skin`` (False; an envelope that is zero
        beyond the cutoff then makes the extra edges contribute nothing).
    max_block : int
        Largest number of pair distances held at once during a build.
    cell_list_above : int
        Beads per replica above which candidates come from :func:`cell_list_pairs`
        (`CELL_LIST_ABOVE`); the list is then not ``dense`` and has no captured or
        Triton-searched graphs.
    """

    def __init__(
        self,
        n_beads: int,
        cutoff: float,
        skin: float = 2.0,
        exclusions: torch.Tensor | None = None,
        capacity: int | None = None,
        exact: bool = True,
        max_block: int = 1 << 23,
        cell_list_above: int = CELL_LIST_ABOVE,
    ):
        if n_beads < 1:
            raise ValueError(f"n_beads must be positive, got {n_beads}")
        if not cutoff > 0:
            raise ValueError(f"cutoff must be positive, got {cutoff}")
        if skin < 0:
            raise ValueError(f"skin must be non-negative, got {skin}")
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.n_beads = n_beads
        self.cutoff = float(cutoff)
        self.skin = float(skin)
        self.capacity = capacity
        self.exact = exact
        self.max_block = max_block
        self.cell_list_above = cell_list_above
        self.dense = n_beads <= cell_list_above
        if exclusions is not None and len(exclusions):
            exclusions = torch.as_tensor(exclusions, dtype=torch.long).reshape(-1, 2)
        else:
            exclusions = None
        self._excluded: torch.Tensor | None = None  # sorted keys i * n + j (cell list)
        self._allowed: torch.Tensor | None = None  # n × n mask (dense search)
        if not self.dense:
            if exclusions is not None:
                both = torch.cat([exclusions, exclusions.flip(1)])
                self._excluded = torch.sort(both[:, 0] * n_beads + both[:, 1]).values
        else:
            self._allowed = ~torch.eye(n_beads, dtype=torch.bool)
            if exclusions is not None:
                self._allowed[exclusions[:, 0], exclusions[:, 1]] = False
                self._allowed[exclusions[:, 1], exclusions[:, 0]] = False
        self._allowed_bytes: torch.Tensor | None = None  # on the device, for the pair search
        self.reference_positions: torch.Tensor | None = None
        self.candidates: Graph | None = None
        self.builds = 0

    # -- building -----------------------------------------------------------------
    def dense_problem(self) -> str | None:
        """Why this list has no static graphs (:meth:`static_graph`, :meth:`searched_graph`:
        captured steps and the Triton pair search, which need the dense search), or None
        when it has them."""
        if self.dense:
            return None
        return (f"the system has {self.n_beads:,} beads per replica, above the "
                f"{self.cell_list_above:,} up to which the neighbour search uses dense n × n "
                "blocks (what the Triton pair search and captured steps need); the "
                "cell-list search runs instead (docs/large-systems.md)")

    def _blocks(self, pos: torch.Tensor, radius: float):
        """Yield ``(start, within)`` per chunk of replicas: ``within[r, i, j]`` is True when
        bead j lies within ``radius`` of bead i (an allowed pair) in replica ``start + r``."""
        r_count, n, _ = pos.shape
        if self._allowed.device != pos.device:  # moved once (no copy inside a captured step)
            self._allowed = self._allowed.to(pos.device)
        allowed = self._allowed
        chunk = max(1, self.max_block // (n * n))
        for start in range(0, r_count, chunk):
            block = pos[start : start + chunk]
            diff = block[:, :, None, :] - block[:, None, :, :]
            yield start, ((diff * diff).sum(-1) < radius * radius) & allowed

    def _candidate_pairs(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """All pairs within ``cutoff + skin``, as flattened (src, dst) sorted by dst."""
        n = pos.shape[1]
        srcs, dsts = [], []
        if not self.dense:
            excluded = self._device_exclusions(pos.device)
            for replica in range(pos.shape[0]):
                src, dst = cell_list_pairs(pos[replica], self.cutoff + self.skin, excluded,
                                           self.max_block)
                srcs.append(src + replica * n)
                dsts.append(dst + replica * n)
            return torch.cat(srcs), torch.cat(dsts)
        for start, within in self._blocks(pos, self.cutoff + self.skin):
            rep, i, j = within.nonzero(as_tuple=True)
            base = (rep + start) * n
            dsts.append(base + i)
            srcs.append(base + j)
        return torch.cat(srcs), torch.cat(dsts)

    def static_graph(
        self, pos: torch.Tensor, slots_per_replica: int, margin: float = FIXED_MARGIN
    ) -> tuple[Graph, torch.Tensor]:
        """Pairs within ``cutoff + margin`` in arrays of static length, without host sync.

        Built from scratch at every call (what a captured CUDA graph replays each step,
        so no skin bookkeeping is needed), from dense distance blocks: each chunk of ``c``
        replicas owns ``c * slots_per_replica`` consecutive slots, filled in (dst, src)
        order, the rest padding (``src = dst = R·n``). Real edges appear in the same relative order
        as in :meth:`build`, so segment reductions see the same summation order.

        Parameters
        ----------
        pos : torch.Tensor, shape (R, n, 3), float32
        slots_per_replica : int
            Edge slots per replica (on average over a chunk).
        margin : float
            Å beyond the cutoff; the force evaluation drops edges at or beyond the cutoff.

        Returns
        -------
        graph : Graph
            ``R * slots_per_replica`` slots with a ``valid`` mask.
        needed : torch.Tensor, shape (), int64
            Slots per replica this call needed (device tensor); more than
            ``slots_per_replica`` means edges were lost and the step must be redone.
        """
        if not self.dense:
            raise ValueError(f"no static graph: {self.dense_problem()}")
        r_count, n, _ = pos.shape
        num_nodes = r_count * n
        srcs, dsts, needed = [], [], []
        for start, within in self._blocks(pos.detach(), self.cutoff + margin):
            reps = within.shape[0]
            index = torch.nonzero_static(within, size=reps * slots_per_replica, fill_value=-1)
            rep, i, j = index.unbind(1)
            real = rep >= 0
            base = (rep + start) * n
            dsts.append(torch.where(real, base + i, num_nodes))
            srcs.append(torch.where(real, base + j, num_nodes))
            count = within.sum(dtype=torch.int64)
            needed.append(torch.div(count + reps - 1, reps, rounding_mode="floor"))
        src, dst = torch.cat(srcs), torch.cat(dsts)
        graph = Graph(src, dst, num_nodes, src < num_nodes, -1, sorted_pairs=True)
        return graph, torch.stack(needed).amax()

    def searched_graph(
        self, pos: torch.Tensor, slots_per_replica: int
    ) -> tuple[Graph, torch.Tensor]:
        """Edges within the cutoff found afresh by the Triton pair search, with both CSRs.

        Like :meth:`static_graph` (static shapes, no host synchronisation, rebuilt at every
        call), but the valid edges are exactly those with ``d < cutoff`` as the kernels
        measure ``d``, compacted over all replicas in ``(dst, src)`` order, and
        ``graph.csr`` holds both CSR layouts (`kernels.pair_search_csr`). Needs Triton on
        ``pos``'s device (a CUDA GPU, or ``TRITON_INTERPRET=1`` on a CPU).

        Parameters
        ----------
        pos : torch.Tensor, shape (R, n, 3), float32
        slots_per_replica : int
            Edge slots per replica; the graph has ``R * slots_per_replica`` slots.

        Returns
        -------
        graph : Graph
            With ``valid``, ``csr`` and ``cutoff`` set.
        needed : torch.Tensor, shape (), int64
            Slots per replica this call needed, ``ceil(edges / R)`` (device tensor); more
            than ``slots_per_replica`` means edges were cut off and the step must be redone.
        """
        from kernels.pair_search import pair_search_csr

        if not self.dense:
            raise ValueError(f"no Triton pair search: {self.dense_problem()}")
        r_count, n, _ = pos.shape
        if self._allowed_bytes is None or self._allowed_bytes.device != pos.device:
            self._allowed_bytes = self._allowed.to(device=pos.device, dtype=torch.uint8)
        found = pair_search_csr(pos.detach(), self._allowed_bytes, self.cutoff,
                                r_count * slots_per_replica)
        num_nodes = r_count * n
        graph = Graph(found.src, found.dst, num_nodes, found.src < num_nodes, -1,
                      sorted_pairs=True, csr=found.csr, cutoff=self.cutoff)
        needed = torch.div(found.needed + r_count - 1, r_count, rounding_mode="floor")
        return graph, needed

    def slots_needed(self, pos: torch.Tensor, margin: float = FIXED_MARGIN) -> int:
        """Largest per-replica edge count within ``cutoff + margin`` now (host value)."""
        if not self.dense:
            raise ValueError(f"no static graph: {self.dense_problem()}")
        counts = [w.flatten(1).sum(1).amax() for _, w in self._blocks(pos, self.cutoff + margin)]
        return int(torch.stack(counts).amax())

    def _device_exclusions(self, device: torch.device) -> torch.Tensor | None:
        """The cell list's excluded keys, moved to ``device`` once."""
        if self._excluded is not None and self._excluded.device != device:
            self._excluded = self._excluded.to(device)
        return self._excluded

    def build(self, pos: torch.Tensor) -> None:
        """Rebuild the candidate list from positions ``(R, n, 3)``."""
        if pos.ndim != 3 or pos.shape[1] != self.n_beads or pos.shape[2] != 3:
            raise ValueError(
                f"positions must have shape (R, {self.n_beads}, 3), got {tuple(pos.shape)}"
            )
        src, dst = self._candidate_pairs(pos.detach())
        num_nodes = pos.shape[0] * pos.shape[1]
        version = self.builds + 1
        if self.capacity is None:
            self.candidates = Graph(src, dst, num_nodes, None, version, sorted_pairs=True)
        else:
            count = int(src.shape[0])
            if count > self.capacity:
                raise NeighborListOverflow(count, self.capacity)
            pad = self.capacity - count
            fill = torch.full((pad,), num_nodes, dtype=torch.long, device=pos.device)
            valid = torch.zeros(self.capacity, dtype=torch.bool, device=pos.device)
            valid[:count] = True
            self.candidates = Graph(
                torch.cat([src, fill]), torch.cat([dst, fill]), num_nodes, valid, version,
                sorted_pairs=True,
            )
        self.reference_positions = pos.detach().clone()
        self.builds = version

    def needs_rebuild(self, pos: torch.Tensor) -> bool:
        """Whether any bead moved more than half the skin since the last build."""
        if self.candidates is None or self.reference_positions is None:
            return True
        if self.reference_positions.shape != pos.shape:
            return True
        moved2 = ((pos.detach() - self.reference_positions) ** 2).sum(-1)
        moved2 = torch.nan_to_num(moved2, nan=0.0)
        return bool(moved2.max() > (0.5 * self.skin) ** 2)

    def update(self, pos: torch.Tensor, exact: bool | None = None) -> Graph:
        """Return the graph for positions ``(R, n, 3)``, rebuilding when needed.

        Parameters
        ----------
        pos : torch.Tensor, shape (R, n, 3)
        exact : bool, optional
            Override the list's ``exact`` setting for this call (exact mode only).
        """
        if self.needs_rebuild(pos):
            self.build(pos)
        graph = self.candidates
        exact = self.exact if exact is None else exact
        if self.capacity is not None or not exact:
            return graph
        flat = pos.detach().reshape(-1, 3)
        d2 = ((flat[graph.dst] - flat[graph.src]) ** 2).sum(-1)
        keep = d2 < self.cutoff**2
        return Graph(graph.src[keep], graph.dst[keep], graph.num_nodes, None, -1,
                     sorted_pairs=True)

    # -- checkpointing ------------------------------------------------------------
    def state_dict(self) -> dict:
        """Tensors that restore the list exactly (see :meth:`load_state_dict`)."""
        if self.candidates is None:
            return {"builds": self.builds}
        state = {
            "builds": self.builds,
            "reference_positions": self.reference_positions,
            "src": self.candidates.src,
            "dst": self.candidates.dst,
            "num_nodes": self.candidates.num_nodes,
        }
        if self.candidates.valid is not None:
            state["valid"] = self.candidates.valid
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore a state written by :meth:`state_dict`."""
        self.builds = int(state["builds"])
        if "src" not in state:
            self.candidates = None
            self.reference_positions = None
            return
        self.reference_positions = state["reference_positions"]
        self.candidates = Graph(
            state["src"], state["dst"], int(state["num_nodes"]), state.get("valid"), self.builds,
            sorted_pairs=True,
        )
