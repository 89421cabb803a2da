"""CGPaiNN in PyTorch, identical in math and layer names to mlcg's StandardPaiNN.

PaiNN (polarizable interaction neural network) carries a scalar feature
``q_i ∈ R^H`` and a vector feature ``μ_i ∈ R^{3×H}`` per bead. Module tree
(docs/mlcg-format.md §5.4)::

    embedding_layer                                 Embedding(embedding_size, H)
    rbf_layer                                       GaussianBasis | ExpNormalBasis (+ its cutoff)
    interaction_blocks.{b}.interatomic_context_net.{0,1,2}
                                                    Linear(H, H), activation, Linear(H, 3H)
    interaction_blocks.{b}.filter_network           Linear(K, 3H)
    interaction_blocks.{b}.cutoff                   envelope on the filter output
    mixing_blocks.{b}.intraatomic_context_net.{0,1,2}
                                                    Linear(2H, H), activation, Linear(H, 3H)
    mixing_blocks.{b}.mu_channel_mix                Linear(H, 2H, bias=False)
    output_network.layers.{0,2,...}                 Linear(H, w1), act, ..., Linear(wm, 1),
                                                    the last without bias

State-dict keys are mlcg's, so an mlcg StandardPaiNN state dict loads 1:1.

Forward pass, for directed edges ``e = (s → d)`` (message from ``s`` into ``d``):

1. ``r_e = x_d − x_s``, ``ρ_e = sqrt(|r_e|² + 10⁻¹⁶) − 10⁻⁸`` (mlcg's ``safe_norm``),
   ``n_e = r_e / ρ_e``; ``q = Emb[type]``, ``μ = 0``.
2. Interaction: ``φ = W_f rbf(ρ) + b_f`` times ``C(ρ)`` (zero at and beyond r_c),
   ``x = A_2 σ(A_1 q + a_1) + a_2``; per edge ``(Δq, Δμ^R, Δμ^μ) = split(φ_e ⊙ x_s)``;
   ``q_d += Σ_e Δq``, ``μ_d += Σ_e (Δμ^R n_e + Δμ^μ μ_s)``.
3. Mixing: ``(V, U) = split(M μ)`` along channels (``M`` = ``mu_channel_mix``),
   ``‖V‖ = sqrt(Σ_xyz V² + ε)``, ``(a, b, c) = split(B_2 σ(B_1 [q, ‖V‖] + b_1) + b_2)``;
   ``q += a + c ⊙ Σ_xyz V U``, ``μ += b ⊙ U``.
4. Per-bead energy ``OutMLP(q)``.

The reference path materialises edge tensors and aggregates by a scatter-add over the
destination index. With ``KernelOptions.fused_message_passing`` each interaction block's
message step (2., after the context net ``x``, which stays a PyTorch MLP) runs as one
Triton kernel (`kernels.painn_message`): distance, direction, basis, envelope, the filter
GEMM and the sums of ``Δq`` and ``Δμ`` per destination on chip, nothing of size E × H in
memory; FP32 operands as three-TF32 products, or float16 / bfloat16 operands with
``mlp_precision``; FP32 sums. Its backward gives exact gradients for positions, ``x`` and
``μ`` (forces are ``−∂E/∂r`` through the whole model), none for weights: training uses
the reference path.

With ``KernelOptions.tabulated_filter`` the same kernel reads each block's filter
``φ(ρ) = (W_f rbf(ρ) + b_f) C(ρ)`` [3H], a function of the length alone, and its slope from
a cubic Hermite table (`filter_tables`: CGSchNet's table builder and spacing,
`workbench.model.fused_schnet.build_filter_tables`, values and exact slopes in float64,
rebuilt when a weight changes) instead of the basis and the filter GEMMs. Forces are
``−∂E/∂r`` of the tabulated model. The tables are read by the message kernel only, so
``tabulated_filter`` brings ``fused_message_passing`` (`workbench.model.force_paths.
TECHNIQUE_NEEDS`; a direct call with the tables alone runs the kernel too); it has no
PyTorch path, and where the kernel cannot run the reference path runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from workbench.model.basis import make_basis, make_cutoff
from workbench.model.force_paths import STEP_TECHNIQUES
from workbench.model.fused_schnet import (
    PRECISION_DTYPES,
    PackedLayers,
    build_filter_tables,
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

#: mlcg's ``safe_norm``: ``sqrt(|r|² + eps) − sqrt(eps)``.
_NORM_EPS = 1e-16
_NORM_SHIFT = 1e-8


@dataclass
class PaiNNConfig(NetworkConfig):
    """Hyper-parameters of :class:`CGPaiNN`.

    Attributes
    ----------
    embedding_size : int
        Number of bead types (rows of the embedding), at least 1 + largest type.
    hidden : int
        H, the width of the scalar and vector features.
    blocks : int
        Number of interaction (and mixing) blocks.
    num_rbf : int
        K.
    cutoff : float
        Graph radius and envelope radius r_c, Å.
    cutoff_lower : float
        r_l of the basis and envelopes, Å.
    basis : str
        ``"exp-normal"`` (mlcg's usual PaiNN basis) or ``"gaussian"``.
    basis_envelope : str
        Envelope inside the basis: ``"cosine"`` or ``"identity"``.
    conv_envelope : str
        Envelope on the filter output (mlcg's ``cutoff`` argument of StandardPaiNN):
        ``"cosine"`` or ``"identity"``; either way it is zero at and beyond r_c.
    output_widths : list of int
        Hidden widths of the output network.
    activation : str
        One of ``ACTIVATIONS``.
    epsilon : float
        Added under the square root of the vector norms of the mixing blocks.
    """

    label: ClassVar[str] = "PaiNN"

    embedding_size: int = 25
    hidden: int = 128
    blocks: int = 3
    num_rbf: int = 64
    cutoff: float = 10.0
    cutoff_lower: float = 0.0
    basis: str = "exp-normal"
    basis_envelope: str = "cosine"
    conv_envelope: str = "cosine"
    output_widths: list[int] = field(default_factory=lambda: [64])
    activation: str = "tanh"
    epsilon: float = 1e-8



class PaiNNInteraction(nn.Module):
    """Message block: scalar and vector updates gathered from the neighbours.

    `forward` is the reference (edge tensors in memory); with ``fused_message_passing``
    `CGPaiNN` runs the same step as `kernels.painn_message` with this block's
    ``filter_network`` packed (`packed_filters`) and ``interatomic_context_net`` in PyTorch.

    Parameters
    ----------
    config : PaiNNConfig
    cutoff : nn.Module
        The envelope on the filter output (mlcg shares one module between blocks).
    """

    def __init__(self, config: PaiNNConfig, cutoff: nn.Module):
        super().__init__()
        h = config.hidden
        self.hidden = h
        self.interatomic_context_net = nn.Sequential(
            nn.Linear(h, h), ACTIVATIONS[config.activation](), nn.Linear(h, 3 * h)
        )
        self.filter_network = nn.Linear(config.num_rbf, 3 * h)
        self.cutoff = cutoff

    def forward(
        self,
        q: torch.Tensor,
        mu: torch.Tensor,
        normdir: torch.Tensor,
        rbf: torch.Tensor,
        envelope: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Updated features ``q + Σ Δq`` and ``μ + Σ Δμ``.

        Parameters
        ----------
        q : torch.Tensor, shape (N, H)
            Scalar features (float32 or float64, as the module).
        mu : torch.Tensor, shape (N, 3, H)
            Vector features.
        normdir : torch.Tensor, shape (E, 3)
            Edge directions ``(x_dst − x_src) / ρ``.
        rbf : torch.Tensor, shape (E, K)
            Basis values of each edge.
        envelope : torch.Tensor, shape (E,)
            ``C(ρ_e)``, zero at and beyond the cutoff and on padding slots.
        src, dst : torch.Tensor, shape (E,), int64
            Edge endpoints, valid node indices.

        Returns
        -------
        q : torch.Tensor, shape (N, H)
        mu : torch.Tensor, shape (N, 3, H)
        """
        h = self.hidden
        w = self.filter_network(rbf) * envelope[:, None]
        x = self.interatomic_context_net(q)
        m = w * x.index_select(0, src)
        dq, dmu_r, dmu_mu = m.split(h, dim=-1)
        dmu = dmu_r[:, None, :] * normdir[:, :, None] + dmu_mu[:, None, :] * mu.index_select(
            0, src
        )
        q = q.index_add(0, dst, dq)
        mu = mu.index_add(0, dst, dmu)
        return q, mu


class PaiNNMixing(nn.Module):
    """Update block: mixes scalar and vector features of each bead.

    Parameters
    ----------
    config : PaiNNConfig
    """

    def __init__(self, config: PaiNNConfig):
        super().__init__()
        h = config.hidden
        self.hidden = h
        self.epsilon = float(config.epsilon)
        self.intraatomic_context_net = nn.Sequential(
            nn.Linear(2 * h, h), ACTIVATIONS[config.activation](), nn.Linear(h, 3 * h)
        )
        self.mu_channel_mix = nn.Linear(h, 2 * h, bias=False)

    def forward(self, q: torch.Tensor, mu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mixed features.

        Parameters
        ----------
        q : torch.Tensor, shape (N, H)
        mu : torch.Tensor, shape (N, 3, H)

        Returns
        -------
        q : torch.Tensor, shape (N, H)
        mu : torch.Tensor, shape (N, 3, H)
        """
        h = self.hidden
        mu_v, mu_w = self.mu_channel_mix(mu).split(h, dim=-1)
        norm_v = torch.sqrt((mu_v * mu_v).sum(dim=1) + self.epsilon)
        x = self.intraatomic_context_net(torch.cat([q, norm_v], dim=-1))
        dq, dmu, dqmu = x.split(h, dim=-1)
        q = q + dq + dqmu * (mu_v * mu_w).sum(dim=1)
        mu = mu + dmu[:, None, :] * mu_w
        return q, mu


class CGPaiNN(nn.Module):
    """PaiNN energy model over a batch of replica graphs.

    The message step of each block runs on the reference path, or as one Triton kernel per
    block with ``KernelOptions.fused_message_passing`` (`kernels.painn_message`; forces
    exact, weights get no gradient there), its filter read from a table with
    ``tabulated_filter``, see `forward`.

    Parameters
    ----------
    config : PaiNNConfig, optional
        Default ``PaiNNConfig()``.

    Raises
    ------
    ValueError
        An unknown activation, basis or envelope, or sizes below 1.
    """

    def __init__(self, config: PaiNNConfig | None = None):
        super().__init__()
        self.config = config = config or PaiNNConfig()
        for name in ("embedding_size", "hidden", "blocks", "num_rbf"):
            if int(getattr(config, name)) < 1:
                raise ValueError(f"PaiNN {name} must be at least 1, got {getattr(config, name)}")
        self.embedding_layer = nn.Embedding(config.embedding_size, config.hidden)
        self.rbf_layer = make_basis(config.basis, config.basis_envelope, config.cutoff_lower,
                                    config.cutoff, config.num_rbf)
        conv_cutoff = make_cutoff(config.conv_envelope, config.cutoff_lower, config.cutoff)
        self.interaction_blocks = nn.ModuleList(
            PaiNNInteraction(config, conv_cutoff) for _ in range(config.blocks)
        )
        self.mixing_blocks = nn.ModuleList(PaiNNMixing(config) for _ in range(config.blocks))
        self.output_network = MLP(
            [config.hidden, *config.output_widths, 1], config.activation, last_bias=False
        )

    @property
    def cutoff(self) -> float:
        """Graph radius r_c in Å."""
        return self.config.cutoff

    def edge_geometry(
        self,
        pos: torch.Tensor,
        src: torch.Tensor,
        dst: torch.Tensor,
        valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Edge lengths and directions, padding slots made harmless.

        Parameters
        ----------
        pos : torch.Tensor, shape (N, 3)
        src, dst : torch.Tensor, shape (E,), int64
        valid : torch.Tensor, shape (E,), bool, optional
            Padding slots (``False``) get index 0 and a length beyond the cutoff, so
            their envelope, messages and gradients are exactly zero.

        Returns
        -------
        d : torch.Tensor, shape (E,)
            mlcg's ``safe_norm`` of ``x_dst − x_src``.
        normdir : torch.Tensor, shape (E, 3)
            ``(x_dst − x_src) / d`` (the difference itself where ``d`` is 0).
        src, dst : torch.Tensor, shape (E,), int64
            Indices safe to gather with.
        """
        diff, src, dst = edge_vectors(pos, src, dst, valid, self.cutoff)
        d = torch.sqrt((diff * diff).sum(-1) + _NORM_EPS) - _NORM_SHIFT
        safe = torch.where(d > 0, d, torch.ones_like(d))
        return d, diff / safe[:, None], src, dst

    def envelope(self, block: PaiNNInteraction, d: torch.Tensor) -> torch.Tensor:
        """Filter envelope of a block, zero at and beyond the cutoff, shape (E,)."""
        return torch.where(d < self.cutoff, block.cutoff(d), torch.zeros_like(d))

    def _check_inputs(self, pos: torch.Tensor, types: torch.Tensor, graph: Graph) -> None:
        if pos.ndim != 2 or pos.shape[-1] != 3:
            raise ValueError(f"PaiNN positions must have shape (N, 3), got {tuple(pos.shape)}")
        if types.shape != pos.shape[:1]:
            raise ValueError(
                f"PaiNN bead types must have shape ({pos.shape[0]},), got {tuple(types.shape)}"
            )
        if graph.src.ndim != 1 or graph.src.shape != graph.dst.shape:
            raise ValueError(
                f"graph src and dst must be 1-D of one length, got {tuple(graph.src.shape)} "
                f"and {tuple(graph.dst.shape)}"
            )
        if graph.valid is not None and graph.valid.shape != graph.src.shape:
            raise ValueError(
                f"graph valid has shape {tuple(graph.valid.shape)}, edges "
                f"{tuple(graph.src.shape)}"
            )

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
        pos : torch.Tensor, shape (N, 3), float32 (or float64 for a float64 model)
            Flattened positions of all replicas, Å.
        types : torch.Tensor, shape (N,), int64
            Bead types.
        graph : Graph
            Directed edges (``src`` → ``dst``); edges at or beyond the cutoff and
            padding slots contribute nothing.
        options : KernelOptions, optional
            ``fused_message_passing`` runs each block's message step as one Triton kernel
            (`kernels.painn_message`; GEMM operands in ``mlp_precision``) where it can run
            (`fused_message_problem`); otherwise the reference path runs, with a one-time
            ``RuntimeWarning`` saying why. ``tabulated_filter`` runs the same kernel (with
            or without ``fused_message_passing``) reading each block's filter from its
            table (`filter_tables`). Techniques CGPaiNN has no kernels for (all but those
            two and the MD step's own, `workbench.model.force_paths.STEP_TECHNIQUES`) are
            ignored with a one-time warning.

        Returns
        -------
        torch.Tensor, shape (N,), dtype of ``pos``
            Energy of each bead, kcal/mol.

        Raises
        ------
        ValueError
            Positions, types or graph arrays of the wrong shape.
        """
        self._check_inputs(pos, types, graph)
        if options is not None:
            own = {"cuda_graph"}  # the simulation's: it captures whole steps
            # the table is read by the message kernel: tabulated_filter brings it
            fused = options.fused_message_passing or options.tabulated_filter
            if fused:  # the kernel's switches and GEMM precision
                own |= {"fused_message_passing", "tabulated_filter",
                        f"mlp_{options.mlp_precision}"}
            missing = [name for name in options.enabled()
                       if name not in STEP_TECHNIQUES and name not in own]
            if missing:
                warn_fallback_once(f"CGPaiNN has no fused kernels for {', '.join(missing)}")
            if fused:
                problem = fused_message_problem(self, pos.device, options)
                if problem is None and pos.dtype != torch.float32:
                    problem = f"the PaiNN message kernel takes float32 positions, not {pos.dtype}"
                if problem is None:
                    return self._fused_forward(pos, types, graph, options.mlp_precision,
                                               options.tabulated_filter)
                warn_fallback_once(problem)
        d, normdir, src, dst = self.edge_geometry(pos, graph.src, graph.dst, graph.valid)
        rbf = self.rbf_layer(d)
        q = self.embedding_layer(types)
        mu = q.new_zeros(q.shape[0], 3, q.shape[1])
        for interaction, mixing in zip(self.interaction_blocks, self.mixing_blocks, strict=True):
            q, mu = interaction(q, mu, normdir, rbf, self.envelope(interaction, d), src, dst)
            q, mu = mixing(q, mu)
        return self.output_network(q).squeeze(-1)

    def _fused_forward(
        self, pos: torch.Tensor, types: torch.Tensor, graph: Graph, precision: str,
        tabulated: bool = False,
    ) -> torch.Tensor:
        """`forward` with each block's message step in `kernels.painn_message` (filter GEMM
        operands in ``precision``: ``"fp32"``, ``"fp16"`` or ``"bf16"``; or, ``tabulated``,
        each block's filter read from its table, `filter_tables`)."""
        from kernels import painn_message

        packed = (filter_tables(self, pos.device) if tabulated
                  else packed_filters(self, precision))
        src, dst, csr, _ = real_edge_graph(self, pos, graph)
        q = self.embedding_layer(types)
        mu = q.new_zeros(q.shape[0], 3, q.shape[1])
        for interaction, mixing, params in zip(self.interaction_blocks, self.mixing_blocks,
                                               packed.layers, strict=True):
            x = interaction.interatomic_context_net(q)
            dq, dmu = painn_message(pos, x, mu, src, dst, csr, params, packed.spec)
            q, mu = mixing(q + dq, mu + dmu)
        return self.output_network(q).squeeze(-1)


def fused_message_problem(
    model: CGPaiNN, device: torch.device, options: KernelOptions
) -> str | None:
    """Why the fused PaiNN message kernel cannot run on ``device``, or None if it can (the
    counterpart of `workbench.model.egnn.fused_edge_problem`)."""
    return kernel_device_problem(model, device, options, "the PaiNN message kernel",
                                 {"hidden width": model.config.hidden})


def packed_filters(model: CGPaiNN, precision: str) -> PackedLayers:
    """The basis description and each block's filter network packed in ``precision``
    (``"fp32"``, ``"fp16"`` or ``"bf16"``), cached until a parameter or the precision
    changes."""
    from kernels import pack_painn_filter

    blocks = model.interaction_blocks

    def pack(key):
        filters = [pack_painn_filter(block.filter_network.weight, block.filter_network.bias,
                                     PRECISION_DTYPES[precision]) for block in blocks]
        spec = radial_spec_of(model.rbf_layer, blocks[0].cutoff, model.cutoff)
        return PackedLayers(key, spec, filters)

    return cached_packing(model, "_packed_filters", precision, pack)


def painn_block_filters(model: CGPaiNN) -> list:
    """Each interaction block's enveloped filter ``d -> (rbf(d) A^T + a) C(d)`` ([G] ->
    [G, 3H]) of a CGPaiNN, for `workbench.model.fused_schnet.build_filter_tables`.

    Not cut at the cutoff: at ``r_c`` the tables hold the filter's left limit (mlcg's
    identity envelope jumps to zero there; the cosine is zero with zero slope), and the
    kernel's cutoff test gives zero at and beyond it, as `CGPaiNN.envelope` does.
    """

    def block_filter(block):
        def filter_fn(d):
            return block.filter_network(model.rbf_layer(d)) * block.cutoff(d)[:, None]
        return filter_fn

    return [block_filter(block) for block in model.interaction_blocks]


def filter_tables(model: CGPaiNN, device: torch.device) -> PackedLayers:
    """The basis description and each block's filter as a cubic Hermite table of 3H columns
    (`workbench.model.fused_schnet.build_filter_tables`: spacing ``TABLE_SPACING``, float64
    values and exact slopes), built on ``device`` and cached until a parameter changes."""
    blocks = model.interaction_blocks

    def pack(key):
        spec = radial_spec_of(model.rbf_layer, blocks[0].cutoff, model.cutoff)
        return PackedLayers(key, spec, build_filter_tables(model, device, painn_block_filters))

    return cached_packing(model, "_filter_tables", ("tables", str(device)), pack)
