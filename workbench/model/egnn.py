"""CGEGNN: an E(n)-equivariant graph network (Satorras et al. 2021) as a CG energy model.

Per layer ``l`` and edge ``j → i`` (``d_ij = |r_i − r_j|``, ``s_ij = d_ij² / r_c²``)::

    m_ij = φ_e(h_i, h_j, s_ij, e(d_ij)) · C(d_ij)        φ_e = act ∘ Linear ∘ act ∘ Linear
    m_i  = Σ_{j ∈ N(i)} m_ij
    h_i ← h_i + φ_h(h_i, m_i)                            φ_h = Linear ∘ act ∘ Linear
    E    = Σ_i ψ(h_i)                                    ψ: output MLP, one value per node

``e(d)`` is the radial basis of `workbench.model.basis` (Gaussian or exp-normal, optionally
enveloped) and ``C`` the cosine envelope ``½(cos(π d / r_c) + 1)`` on every message.

Module tree::

    embedding_layer                  Embedding(embedding_size, H)
    rbf_layer                        GaussianBasis | ExpNormalBasis (+ its cutoff)
    envelope                         CosineCutoff(0, r_c), the messages' envelope
    layers.{l}.edge_lin1             Linear(2H + 1 + K, F)   inputs [h_i, h_j, s_ij, e(d_ij)]
    layers.{l}.edge_lin2             Linear(F, F)
    layers.{l}.node_lin1             Linear(H + F, H)        inputs [h_i, m_i]
    layers.{l}.node_lin2             Linear(H, H)
    output_network.layers.{0,2,...} Linear(H, w1), act, ..., Linear(wm, 1, bias=False)

**No coordinate update.** EGNN's update ``x_i ← x_i + Σ_j (x_i − x_j) φ_x(m_ij)`` is left
out, as Satorras et al. do for invariant targets (their QM9 model): an energy needs only the
invariant channel. Kept, it would be equivariant and the energy still invariant and
differentiable, but the forces would need second derivatives through the updated
coordinates and the updated distances would leave the cutoff graph's support (an edge's
envelope no longer set by the distance the neighbour list tested). So:

* **E(3) invariance of E**: the network reads positions only through ``d_ij`` (as
  ``s_ij`` and ``e(d_ij)``, and in ``C(d_ij)``), which rotations, reflections and
  translations leave unchanged; sums over neighbours and over nodes do not depend on the
  order of beads or of replicas.
* **Equivariance of forces**: forces are ``F = −∂E/∂r`` by autograd (or by the fused
  kernel's exact backward pass); the gradient of an invariant function rotates with the
  coordinates, ``F(Rr + t) = R F(r)``, and sums to zero over each replica.
* **Energy conservation**: forces are the exact gradient of one scalar function, which is
  continuously differentiable where the graph changes: ``C`` and ``C'`` vanish at ``r_c``,
  so a pair entering or leaving the cutoff (or the Verlet skin) adds nothing; padding slots
  and edges at or beyond the cutoff contribute exactly zero to energies and forces.

The reference path materialises edge tensors (``index_add_`` aggregation). With
``KernelOptions.fused_message_passing`` the edge block runs as one Triton kernel per layer
(`kernels.egnn_edge`; FP32 operands as three-TF32 products, or float16 / bfloat16 operands
with ``mlp_precision``; FP32 sums), the first edge layer split into per-node products
``xa = h Wi^T + b1`` and ``xb = h Wj^T``, the edge lengths and envelope made once per step
for every layer (`kernels.edge_distances`, `kernels.egnn_edge.edge_envelopes`). The fused op
returns gradients for positions and features only (forces); training uses the reference
path.
`CGEGNN.edge_saved` chooses its backward: from the pre-activations the forward stored (the
default) or with the edge MLP evaluated anew, which keeps nothing per edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from workbench.model.basis import (
    CosineCutoff,
    make_basis,
)
from workbench.model.fused_schnet import (
    PRECISION_DTYPES,
    PackedLayers,
    cached_packing,
    kernel_device_problem,
    radial_spec_of,
    real_edge_graph,
    warn_fallback_once,
)
from workbench.model.geometry import edge_vectors
from workbench.model.network_config import ACTIVATIONS, NetworkConfig
from workbench.model.options import KernelOptions
from workbench.model.schnet import MLP
from workbench.neighbors import Graph

#: Model-level techniques of `KernelOptions` that CGEGNN has no kernels for (the MD-level
#: ones, CUDA graphs, pair search and integrator, do not concern the model).
NO_EGNN_KERNELS = ("fused_radial_basis", "csr_aggregation", "fused_update", "tabulated_filter",
                   "pair_filter")


@dataclass
class EGNNConfig(NetworkConfig):
    """Hyper-parameters of :class:`CGEGNN`.

    Attributes
    ----------
    embedding_size : int
        Number of bead types (rows of the embedding), at least 1 + largest type.
    hidden : int
        H, node feature width.
    edge_width : int
        F, width of the edge MLP and of the messages (a power of two >= 16 for the fused
        kernel).
    layers : int
        Number of message-passing layers.
    num_rbf : int
        K, radial basis functions on ``[0, cutoff]``.
    cutoff : float
        Graph radius and envelope radius r_c, Å.
    basis : str
        ``"gaussian"`` or ``"exp-normal"``.
    basis_envelope : str
        Envelope inside the basis: ``"cosine"`` or ``"identity"`` (the messages always
        carry the cosine envelope).
    output_widths : list of int
        Hidden widths of the per-node energy head.
    activation : str
        One of ``ACTIVATIONS`` of `workbench.model.schnet` (``"silu"`` as in EGNN).
    """

    label: ClassVar[str] = "EGNN"

    embedding_size: int = 25
    hidden: int = 64
    edge_width: int = 64
    layers: int = 4
    num_rbf: int = 32
    cutoff: float = 10.0
    basis: str = "gaussian"
    basis_envelope: str = "cosine"
    output_widths: list[int] = field(default_factory=lambda: [64])
    activation: str = "silu"



class EGNNLayer(nn.Module):
    """One EGNN layer without coordinate update: edge MLP ``φ_e`` and node MLP ``φ_h``."""

    def __init__(self, config: EGNNConfig):
        super().__init__()
        h, f, k = config.hidden, config.edge_width, config.num_rbf
        self.edge_lin1 = nn.Linear(2 * h + 1 + k, f)
        self.edge_lin2 = nn.Linear(f, f)
        self.node_lin1 = nn.Linear(h + f, h)
        self.node_lin2 = nn.Linear(h, h)
        self.activation = ACTIVATIONS[config.activation]()

    def messages(
        self,
        h: torch.Tensor,
        s: torch.Tensor,
        rbf: torch.Tensor,
        envelope: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
    ) -> torch.Tensor:
        """Summed messages ``m_i`` (reference path: edge tensors in memory).

        Parameters
        ----------
        h : torch.Tensor, shape (N, H)
            Node features.
        s : torch.Tensor, shape (E,)
            ``d² / r_c²`` per edge.
        rbf : torch.Tensor, shape (E, K)
            Basis values per edge.
        envelope : torch.Tensor, shape (E,)
            ``C(d)``, zero on padding slots and at or beyond the cutoff.
        src, dst : torch.Tensor, shape (E,), int64
            Edge endpoints, safe to gather with (message ``src`` → ``dst``).

        Returns
        -------
        torch.Tensor, shape (N, F)
        """
        x = torch.cat([h.index_select(0, dst), h.index_select(0, src), s[:, None], rbf], dim=-1)
        m = self.activation(self.edge_lin2(self.activation(self.edge_lin1(x))))
        m = m * envelope[:, None]
        return m.new_zeros(h.shape[0], m.shape[1]).index_add_(0, dst, m)

    def update(self, h: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        """``h + φ_h(h, m)``, shape (N, H)."""
        return h + self.node_lin2(self.activation(self.node_lin1(torch.cat([h, m], dim=-1))))


class CGEGNN(nn.Module):
    """EGNN energy model over a batch of replica graphs (same interface as ``CGSchNet``).

    Parameters
    ----------
    config : EGNNConfig

    Attributes
    ----------
    edge_saved : str
        What the fused edge kernel keeps per edge for its backward (`kernels.egnn_edge.SAVED`,
        ``saved`` of `kernels.egnn_edge`): ``"activations"`` (the class default: the
        pre-activations, 8 F bytes per edge and layer with FP32 operands, 4 F with 16-bit
        ones, about 0.6 or 0.3 GB per layer at 1ENH × 64; one backward pass) or ``"none"``
        (the backward evaluates the edge MLP anew, twice; nothing kept). One layer's
        forward and backward at 1ENH × 64 on an H100 (``python -m
        benchmarks.bench_egnn_backward``): 2.71 against 4.02 ms with FP32 operands, 1.96
        against 2.03 ms with fp16 ones. Set ``"none"`` on an instance where
        memory is short. The reference path ignores it.
    """

    edge_saved: str = "activations"

    def __init__(self, config: EGNNConfig | None = None):
        super().__init__()
        self.config = config = config or EGNNConfig()
        self.embedding_layer = nn.Embedding(config.embedding_size, config.hidden)
        self.rbf_layer = make_basis(config.basis, config.basis_envelope, 0.0, config.cutoff,
                                    config.num_rbf)
        self.envelope = CosineCutoff(0.0, config.cutoff)
        self.layers = nn.ModuleList(EGNNLayer(config) for _ in range(config.layers))
        self.output_network = MLP(
            [config.hidden, *config.output_widths, 1], config.activation, last_bias=False
        )

    @property
    def cutoff(self) -> float:
        """Graph radius r_c in Å."""
        return self.config.cutoff

    def edge_terms(
        self, pos: torch.Tensor, graph: Graph
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Invariant edge inputs, with padding slots made harmless.

        Parameters
        ----------
        pos : torch.Tensor, shape (N, 3)
        graph : Graph
            Padding slots (``valid`` False) get index 0 and a length beyond the cutoff, so
            their envelope, messages and gradients are exactly zero.

        Returns
        -------
        s : torch.Tensor, shape (E,)
            ``d² / r_c²``.
        rbf : torch.Tensor, shape (E, K)
        envelope : torch.Tensor, shape (E,)
            ``C(d)``, zero at and beyond the cutoff.
        src, dst : torch.Tensor, shape (E,), int64
            Indices safe to gather with.
        """
        diff, src, dst = edge_vectors(pos, graph.src, graph.dst, graph.valid, self.cutoff)
        d = torch.linalg.vector_norm(diff, dim=-1)  # CosineCutoff: zero at and beyond r_c
        return (d / self.cutoff) ** 2, self.rbf_layer(d), self.envelope(d), src, dst

    def forward(
        self,
        pos: torch.Tensor,
        types: torch.Tensor,
        graph: Graph,
        options: KernelOptions | None = None,
    ) -> torch.Tensor:
        """Per-node energies.

        Parameters
        ----------
        pos : torch.Tensor, shape (N, 3), float32 (or float64 on the reference path)
            Flattened positions of all replicas.
        types : torch.Tensor, shape (N,), int64
            Bead types.
        graph : Graph
            Directed edges (``src`` → ``dst``); edges at or beyond the cutoff and padding
            slots contribute nothing.
        options : KernelOptions, optional
            ``fused_message_passing`` runs each layer's edge block as one Triton kernel
            (`kernels.egnn_edge`) where it can run (`fused_edge_problem`); otherwise, and
            for the techniques CGEGNN has no kernels for, the reference path runs, with a
            one-time warning.

        Returns
        -------
        torch.Tensor, shape (N,)
        """
        if options is not None:
            missing = [t for t in NO_EGNN_KERNELS if getattr(options, t)]
            if options.mlp_precision != "fp32" and not options.fused_message_passing:
                missing.append(f"{options.mlp_precision} without fused_message_passing")
            if missing:
                warn_fallback_once(f"CGEGNN has no fused kernels for {', '.join(missing)}")
            if options.fused_message_passing:
                problem = fused_edge_problem(self, pos.device, options)
                if problem is None and pos.dtype != torch.float32:
                    problem = f"the EGNN edge kernel takes float32 positions, not {pos.dtype}"
                if problem is None:
                    return self._fused_forward(pos, types, graph, options.mlp_precision)
                warn_fallback_once(problem)
        s, rbf, envelope, src, dst = self.edge_terms(pos, graph)
        h = self.embedding_layer(types)
        for layer in self.layers:
            h = layer.update(h, layer.messages(h, s, rbf, envelope, src, dst))
        return self.output_network(h).squeeze(-1)

    def _fused_forward(
        self, pos: torch.Tensor, types: torch.Tensor, graph: Graph, precision: str
    ) -> torch.Tensor:
        """`forward` with each edge block in `kernels.egnn_edge` (GEMM operands in
        ``precision``: ``"fp32"``, ``"fp16"`` or ``"bf16"``)."""
        from kernels import edge_distances, egnn_edge
        from kernels.egnn_edge import edge_envelopes

        packed = packed_edges(self, precision)
        src, dst, csr, searched = real_edge_graph(self, pos, graph)
        # lengths and envelope once for every layer; the layers' dE/dd add up in autograd
        # and one position-gradient pass turns the sum into forces
        dist = edge_distances(pos, src, dst, csr)
        envelope = edge_envelopes(dist, packed.spec)
        hidden = self.config.hidden
        h = self.embedding_layer(types)
        for layer, params in zip(self.layers, packed.layers, strict=True):
            w1 = layer.edge_lin1.weight
            xa = nn.functional.linear(h, w1[:, :hidden], layer.edge_lin1.bias)
            xb = nn.functional.linear(h, w1[:, hidden : 2 * hidden])
            m = egnn_edge(dist, xa, xb, src, dst, csr, params, packed.spec,
                          activation=self.config.activation, saved=self.edge_saved,
                          sorted_edges=searched, envelope=envelope)
            h = layer.update(h, m)
        return self.output_network(h).squeeze(-1)


def fused_edge_problem(
    model: CGEGNN, device: torch.device, options: KernelOptions
) -> str | None:
    """Why the fused EGNN edge kernel cannot run on ``device``, or None if it can (the
    counterpart of `workbench.model.fused_schnet.fused_path_problem`)."""
    from kernels.egnn_edge import ACTIVATIONS as FUSED_ACTIVATIONS

    config = model.config
    problem = kernel_device_problem(model, device, options, "the EGNN edge kernel",
                                    {"edge width": config.edge_width})
    if problem is None and config.activation not in FUSED_ACTIVATIONS:
        problem = f"the EGNN edge kernel implements {FUSED_ACTIVATIONS}, not {config.activation}"
    return problem


def packed_edges(model: CGEGNN, precision: str) -> PackedLayers:
    """The basis description and the edge weights packed in ``precision`` (``"fp32"``,
    ``"fp16"`` or ``"bf16"``), cached until a parameter or the precision changes."""
    from kernels import pack_edge_mlp

    cols = 2 * model.config.hidden

    def pack(key):
        edges = [
            pack_edge_mlp(layer.edge_lin1.weight[:, cols + 1 :], layer.edge_lin1.weight[:, cols],
                          layer.edge_lin2.weight, layer.edge_lin2.bias,
                          PRECISION_DTYPES[precision])
            for layer in model.layers
        ]
        spec = radial_spec_of(model.rbf_layer, model.envelope, model.cutoff)
        return PackedLayers(key, spec, edges)

    return cached_packing(model, "_packed_edges", precision, pack)
