"""A potential is CGSchNet plus prior terms, evaluated for many replicas at once."""

from __future__ import annotations

import torch
from torch import nn

from workbench.model.geometry import segment_gathers
from workbench.model.options import KernelOptions
from workbench.model.priors import PriorTerm
from workbench.model.schnet import CGSchNet
from workbench.neighbors import Graph


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
        Bead types of the molecule (SchNet embedding indices).
    schnet : CGSchNet, optional
        The neural term; None for a prior-only (classical) potential.
    priors : dict of str to PriorTerm, optional
        Named prior terms, summed in order.
    """

    def __init__(
        self,
        bead_types: torch.Tensor,
        schnet: CGSchNet | None = None,
        priors: dict[str, PriorTerm] | None = None,
    ):
        super().__init__()
        bead_types = torch.as_tensor(bead_types, dtype=torch.long)
        self.register_buffer("bead_types", bead_types)
        self.schnet = schnet
        self.priors = nn.ModuleDict(priors or {})
        self.metadata: dict = {}
        if schnet is not None and int(bead_types.max()) >= schnet.config.embedding_size:
            raise ValueError(
                f"bead type {int(bead_types.max())} is outside the embedding of size "
                f"{schnet.config.embedding_size}"
            )

    @property
    def n_beads(self) -> int:
        """Beads per replica n."""
        return int(self.bead_types.shape[0])

    @property
    def cutoff(self) -> float:
        """Radius of the SchNet graph in Å (0 without SchNet)."""
        return self.schnet.cutoff if self.schnet is not None else 0.0

    def energy_terms(
        self, pos: torch.Tensor, graph: Graph | None, options: KernelOptions | None = None
    ) -> dict[str, torch.Tensor]:
        """Energy of each term per replica.

        Parameters
        ----------
        pos : torch.Tensor, shape (R, n, 3), float32
        graph : Graph or None
            SchNet graph over the flattened beads; needed when SchNet is present.
        options : KernelOptions, optional
            Fused kernels to use for SchNet; default the reference path.

        Returns
        -------
        dict of str to torch.Tensor, each shape (R,), float32
            ``"schnet"`` first (if present), then the priors by name.
        """
        terms: dict[str, torch.Tensor] = {}
        if self.schnet is not None:
            if graph is None:
                raise ValueError("a SchNet potential needs a neighbour graph")
            r_count, n, _ = pos.shape
            types = self.bead_types.repeat(r_count)
            node_energy = self.schnet(pos.reshape(-1, 3), types, graph, options)
            terms["schnet"] = node_energy.reshape(r_count, n).sum(-1)
        with segment_gathers(prior_segment_sums(pos, options)):
            for name, prior in self.priors.items():
                terms[name] = prior(pos)
        return terms

    def energy(
        self, pos: torch.Tensor, graph: Graph | None, options: KernelOptions | None = None
    ) -> torch.Tensor:
        """Total energy per replica, shape (R,), float32."""
        terms = self.energy_terms(pos, graph, options)
        if not terms:
            return pos.new_zeros(pos.shape[0])
        return torch.stack(list(terms.values())).sum(0)

    def energy_and_forces(
        self, pos: torch.Tensor, graph: Graph | None, options: KernelOptions | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Energies ``(R,)`` and forces ``−∂E/∂pos`` ``(R, n, 3)``, float32."""
        with torch.enable_grad():
            pos = pos.detach().requires_grad_(True)
            energy = self.energy(pos, graph, options)
            (grad,) = torch.autograd.grad(energy.sum(), pos)
        return energy.detach(), -grad
