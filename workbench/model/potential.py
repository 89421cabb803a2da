"""A potential is a neural network (CGSchNet, CGPaiNN, ...) plus prior terms, evaluated for
many replicas at once."""

from __future__ import annotations

import functools

import torch
from torch import nn

from workbench.model.architectures import RESERVED_NAMES, architecture_of
from workbench.model.geometry import segment_gathers
from workbench.model.options import KernelOptions
from workbench.model.priors import PriorTerm
from workbench.model.schnet import CGSchNet
from workbench.neighbors import Graph, without_empty_slots

#: Network backends that take the graph's slots as they are: OpenEquivariance's convolution
#: walks the destination-sorted layout of every slot, deepmd-kit (``"deepmd"``) its own
#: neighbour table.
#: cuEquivariance gathers and scatters by the edge arrays, as e3nn does: given the pair
#: search's slots, its eager steps with the radial tables ran 451 timestep·mol/s against
#: 578 without the pair search (1ENH × 64, H200, one run).
SLOT_BACKENDS = frozenset({"openequivariance", "deepmd"})


def prior_segment_sums(pos: torch.Tensor, options: KernelOptions | None) -> bool:
    """Whether the priors' bead gathers sum their gradients with the Triton segment sum:
    on a fused path (any technique on) with CUDA tensors (see ``workbench.model.geometry``)."""
    if options is None or options.is_baseline or not pos.is_cuda:
        return False
    from kernels import triton_available

    return triton_available()


class Potential(nn.Module):
    """Energy and forces of R replicas of one molecule.

    Parameters
    ----------
    bead_types : torch.Tensor, shape (n,), int64
        Bead types of the molecule (embedding indices of the network).
    network : nn.Module, optional
        The neural term, of an architecture registered in
        :data:`workbench.model.architectures.ARCHITECTURES` (CGSchNet, CGPaiNN, ...);
        None for a prior-only (classical) potential.
    priors : dict of str to PriorTerm, optional
        Named prior terms, summed in order.
    schnet : CGSchNet, optional
        Keyword-only former name of ``network`` (give one of the two).

    Attributes
    ----------
    architecture : str or None
        Registered name of the network (``"schnet"``, ``"painn"``, ...). The network is
        held under that attribute name (``potential.schnet``, ``potential.painn``), so
        its state-dict keys start with it; ``network`` returns it whatever it is.
    schnet : CGSchNet or None
        The network when it is a CGSchNet, else None: the SchNet-only machinery (fused
        kernels, tables) reads this and leaves other networks alone.
    """

    def __init__(
        self,
        bead_types: torch.Tensor,
        network: nn.Module | None = None,
        priors: dict[str, PriorTerm] | None = None,
        *,
        schnet: CGSchNet | None = None,
    ):
        super().__init__()
        if schnet is not None:
            if network is not None:
                raise TypeError("give the network as network= or schnet=, not both")
            network = schnet
        bead_types = torch.as_tensor(bead_types, dtype=torch.long)
        self.register_buffer("bead_types", bead_types)
        self.architecture = None if network is None else architecture_of(network)
        if self.architecture in RESERVED_NAMES or hasattr(type(self), str(self.architecture)):
            raise ValueError(f"architecture name {self.architecture!r} would shadow an "
                             "attribute of Potential; register it under another name")
        self.schnet = None
        if network is not None:
            setattr(self, self.architecture, network)
        self.priors = nn.ModuleDict(priors or {})
        self.metadata: dict = {}
        if network is not None and int(bead_types.max()) >= network.config.embedding_size:
            raise ValueError(
                f"bead type {int(bead_types.max())} is outside the embedding of size "
                f"{network.config.embedding_size}"
            )

    @property
    def network(self) -> nn.Module | None:
        """The neural term, whatever its architecture; None for a prior-only potential."""
        return None if self.architecture is None else getattr(self, self.architecture)

    @property
    def n_beads(self) -> int:
        """Beads per replica n."""
        return int(self.bead_types.shape[0])

    @property
    def cutoff(self) -> float:
        """Radius of the network's graph in Å (0 without a network)."""
        return self.network.cutoff if self.network is not None else 0.0

    def energy_terms(
        self, pos: torch.Tensor, graph: Graph | None, options: KernelOptions | None = None
    ) -> dict[str, torch.Tensor]:
        """Energy of each term per replica.

        Parameters
        ----------
        pos : torch.Tensor, shape (R, n, 3), float32
        graph : Graph or None
            Network graph over the flattened beads; needed when a network is present.
        options : KernelOptions, optional
            Fused kernels to use for the network; default the reference path.

        Returns
        -------
        dict of str to torch.Tensor, each shape (R,), float32
            The network's term first (if present), named after its architecture
            (``"schnet"``, ``"painn"``, ...), then the priors by name.
        """
        terms: dict[str, torch.Tensor] = {}
        if self.network is not None:
            terms[self.architecture] = self._network_energy(pos, graph, options)
        with segment_gathers(prior_segment_sums(pos, options)):
            for name, prior in self.priors.items():
                terms[name] = prior(pos)
        return terms

    def _network_energy(self, pos, graph, options) -> torch.Tensor:
        if graph is None:
            raise ValueError(f"a potential with a {self.architecture} network needs a "
                             "neighbour graph")
        r_count, n, _ = pos.shape
        types = self._replica_types(r_count)
        if graph.valid is not None and self._reads_edges_only(pos, options):
            graph = without_empty_slots(graph)
        node_energy = self.network(pos.reshape(-1, 3), types, graph, options)
        return node_energy.reshape(r_count, n).sum(-1)

    def _replica_types(self, r_count: int) -> torch.Tensor:
        """``bead_types`` repeated for ``r_count`` replicas, shape (r_count · n,) int64: the
        same tensor at every call while the types and the count stay, so that what a path
        derives from the types alone can be kept (`fused_schnet.first_block_inputs`)."""
        key = (r_count, self.bead_types.device, self.bead_types.data_ptr(),
               self.bead_types._version)
        cached = self.__dict__.get("_repeated_types")
        if cached is None or cached[0] != key:
            cached = (key, self.bead_types.repeat(r_count))
            self.__dict__["_repeated_types"] = cached
        return cached[1]

    def _reads_edges_only(self, pos: torch.Tensor, options: KernelOptions | None) -> bool:
        """Whether this evaluation reads the graph's edge arrays only (every slot, no CSR
        layouts: a reference path, or CGSchNet's fused path with none of the techniques
        that walk the layouts) in an eager step, where `without_empty_slots` pays."""
        from workbench.model.force_paths import force_path, walks_layouts

        if pos.is_cuda and torch.cuda.is_current_stream_capturing():
            return False
        if getattr(self.network, "backend", None) in SLOT_BACKENDS:
            return False
        options = options or KernelOptions()
        return (force_path(self.network, pos.device, options) != "triton"
                or not walks_layouts(self.network, options))

    def energy(
        self, pos: torch.Tensor, graph: Graph | None, options: KernelOptions | None = None
    ) -> torch.Tensor:
        """Total energy per replica, shape (R,), float32.

        On fused CUDA paths every prior with a Triton kernel runs inside one op
        (``kernels.term_rows.term_energies``): one segment sum and one reduction for all of
        them, instead of one per prior. Elsewhere the sum of :meth:`energy_terms`.
        """
        if not prior_segment_sums(pos, options):
            terms = self.energy_terms(pos, graph, options)
            if not terms:
                return pos.new_zeros(pos.shape[0])
            return torch.stack(list(terms.values())).sum(0)
        from kernels.term_rows import term_energies

        parts = [self._network_energy(pos, graph, options)] if self.network is not None else []
        specs = []
        with segment_gathers(True):
            for prior in self.priors.values():
                spec = prior.fused_term(pos.dtype) if prior.num_terms else None
                if spec is None:
                    parts.append(prior(pos))
                else:
                    specs.append(spec)
        if specs:
            parts.append(term_energies(pos, specs, self._term_layout(specs, pos.shape[1])))
        # one add per term, not a stack and a reduction (two kernels fewer in a captured step)
        return functools.reduce(torch.add, parts) if parts else pos.new_zeros(pos.shape[0])

    def _term_layout(self, specs, n_beads: int):
        """``kernels.term_rows.term_layout`` of the priors' term lists, built once (before any
        graph capture) and kept while the index tensors stay the same."""
        from kernels.term_rows import term_layout

        key = (n_beads, tuple((id(s.index), s.index.data_ptr(), s.index._version, s.rows)
                              for s in specs))
        cache = self.__dict__.setdefault("_term_layouts", {})
        if key not in cache:
            cache.clear()
            cache[key] = term_layout(specs, n_beads)
        return cache[key]

    def energy_and_forces(
        self, pos: torch.Tensor, graph: Graph | None, options: KernelOptions | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Energies ``(R,)`` and forces ``−∂E/∂pos`` ``(R, n, 3)``, float32."""
        with torch.enable_grad():
            pos = pos.detach().requires_grad_(True)
            energy = self.energy(pos, graph, options)
            # seeded with ones: the gradient of the sum without a reduction kernel
            (grad,) = torch.autograd.grad(energy, pos, torch.ones_like(energy))
        return energy.detach(), -grad
