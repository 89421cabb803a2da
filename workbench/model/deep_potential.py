"""CGDeepPotential: a Deep Potential (DeePMD's smooth edition, descriptor ``se_e2_a``) as a CG
energy model.

For a centre bead ``i`` (an edge's ``dst``) and a neighbour ``j`` (its ``src``), with
``r_ij = r_j − r_i`` and ``r = |r_ij|``::

    u      = (r − r_s) / (r_c − r_s), clamped to [0, 1]
    sw(u)  = u³ (−6u² + 15u − 10) + 1            1 below r_s, 0 from r_c on
    s(r)   = sw(u) / r                           1/r below r_s, 0 at and beyond r_c
    R̃_ij   = s(r) [1, x_ij / r, y_ij / r, z_ij / r]        a row of the environment matrix
    G_ij   = g_{t_i, t_j}(s(r)) ∈ R^{M1}         embedding network of the type pair
    A_i    = (1 / N_c) Σ_j G_ij^T R̃_ij ∈ R^{M1×4}
    D_i    = A_i A_i^<T ∈ R^{M1×M2}              A^< = the first M2 rows of A (axis neurons)
    E_i    = f_{t_i}(vec D_i) + b_{t_i}          fitting network and energy bias of the type
    E      = Σ_i E_i,  F = −∂E/∂r (autograd)

``r_s`` is ``cutoff_smooth`` (DeePMD's ``rcut_smth``), ``r_c`` the ``cutoff`` (``rcut``);
``sw`` and its first and second derivatives are continuous at ``r_s`` and vanish at ``r_c``.
``N_c`` is a fixed normalisation (``num_neighbors``): DeePMD divides by its ``sel``, the
fixed neighbour count of its padded neighbour lists; the engine's graphs are dynamic and
have none. ``M1`` is the last embedding width, ``M2`` is ``axis_neurons``.

Embedding networks (DeePMD's ``embedding_net``), widths ``[1, w1, ..., wk]``, activation
``act``: a layer from width ``a`` to ``b`` computes ``y = act(x W + c)``, plus ``x`` where
``b = a`` or ``[x, x]`` where ``b = 2a``. Fitting networks (``fitting_net``): the same
layers, with the identity skip only where a hidden layer keeps the width (never from the
descriptor), then a linear map to one value. One embedding network per ordered type pair
``(t_i, t_j)``, or per neighbour type ``t_j`` with ``type_one_side``; one fitting network
per centre type.

Module tree (parameters stacked over networks; ``P`` = T² pairs, or T with
``type_one_side``; ``T`` = ``embedding_size``)::

    embedding_weights.{l}    (P, w_l, w_{l+1})     layer l of every embedding network
    embedding_biases.{l}     (P, w_{l+1})
    fitting_weights.{l}      (T, v_l, v_{l+1})     v = [M1·M2, fitting widths...]
    fitting_biases.{l}       (T, v_{l+1})
    fitting_out              (T, v_last)           last linear map, no bias
    energy_bias              (T,)                  per-type atomic energy, zero at start

* **Invariance**: ``D_i`` reads distances through ``s`` and ``G``, and directions through
  ``A_i A_i^<T``, a product of two ``M1×4``/``M2×4`` matrices whose 4-dim index contracts;
  a rotation acts on the last three columns of every ``R̃_ij`` alike and cancels (so do
  reflections); translations leave ``r_ij`` unchanged; the sums over neighbours and over
  beads do not depend on their order. Forces by autograd are equivariant.
* **Padding and the cutoff**: padding slots get index 0 and a length beyond ``r_c``, so
  ``s = 0`` and ``R̃_ij = 0``: their (finite) embedding is multiplied by zero, in the
  energy and in its gradient, as for edges at or beyond ``r_c``. ``s`` and ``s'`` vanish
  at ``r_c``, so a pair crossing the cutoff changes neither energy nor forces.

Evaluation: edges are grouped by embedding network (one stable sort) into blocks of equal
length, one network per block, and each layer is one batched matrix product over the
blocks with their networks' weights gathered (`_batched_mlp`); beads likewise by fitting
network (`_padded_slots`: one host read of the number of networks present, or, with
``cuda_graph``, shapes fixed by the numbers of rows and networks and no host read). No
dense neighbour matrices: ``A_i`` is an ``index_add_`` of per-edge outer products onto
``dst``. Fast paths (`forward`'s options, ``docs/deep-potential.md``): ``tabulated_filter``
reads the embedding networks from cubic tables (`workbench.model.dp_tables`, DeePMD's model
compression); ``fused_message_passing`` computes ``A_i``, reading them, in one Triton
kernel per destination (`kernels.dp_descriptor`); ``mlp_precision`` runs the networks'
products on 16-bit operands; ``cuda_graph`` groups rows with fixed shapes so that whole
steps can be captured.
deepmd-kit interoperability is planned.
DeePMD's data statistics of the environment matrix (``davg``/``dstd``) are not applied:
``s`` enters unnormalised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from workbench.model.dp_tables import (
    TABLE_MIN_DISTANCE,
    EmbeddingTable,
    embedding_table,
    tabulated_embedding,
)
from workbench.model.force_paths import implemented_techniques
from workbench.model.fused_schnet import (
    PRECISION_DTYPES,
    kernel_device_problem,
    real_edge_graph,
)
from workbench.model.network_config import ACTIVATIONS, NetworkConfig
from workbench.model.options import KernelOptions
from workbench.neighbors import Graph


@dataclass
class DeepPotentialConfig(NetworkConfig):
    """Hyper-parameters of :class:`CGDeepPotential` (DeePMD's names in brackets).

    Attributes
    ----------
    embedding_size : int
        T, number of bead types, at least 1 + largest type.
    cutoff : float
        r_c, graph radius, Å (``rcut``).
    cutoff_smooth : float
        r_s, where the switching of ``s(r)`` starts, Å, below ``cutoff`` (``rcut_smth``).
    embedding_widths : list of int
        Hidden and output widths of each embedding network, the last one M1 (``neuron``).
    axis_neurons : int
        M2, columns of the embedding kept for the descriptor's second factor, at most M1
        (``axis_neuron``).
    fitting_widths : list of int
        Hidden widths of each fitting network (``fitting_net.neuron``).
    num_neighbors : float
        N_c, the fixed normalisation of ``A_i`` (DeePMD divides by its ``sel`` sum).
    type_one_side : bool
        One embedding network per neighbour type instead of one per ordered type pair.
    activation : str
        One of ``ACTIVATIONS`` (``"tanh"`` as in DeePMD).
    """

    label: ClassVar[str] = "Deep Potential"

    embedding_size: int = 25
    cutoff: float = 10.0
    cutoff_smooth: float = 8.0
    embedding_widths: list[int] = field(default_factory=lambda: [16, 32, 64])
    axis_neurons: int = 8
    fitting_widths: list[int] = field(default_factory=lambda: [128, 128, 128])
    num_neighbors: float = 32.0
    type_one_side: bool = False
    activation: str = "tanh"

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 <= self.cutoff_smooth < self.cutoff:
            raise ValueError(f"cutoff_smooth must lie in [0, cutoff = {self.cutoff}), got "
                             f"{self.cutoff_smooth}")
        if not self.embedding_widths or min(self.embedding_widths) < 1:
            raise ValueError(f"embedding_widths must be positive, got {self.embedding_widths}")
        if not 1 <= self.axis_neurons <= self.embedding_widths[-1]:
            raise ValueError(f"axis_neurons must lie in [1, {self.embedding_widths[-1]}] (the "
                             f"last embedding width), got {self.axis_neurons}")
        if self.fitting_widths and min(self.fitting_widths) < 1:
            raise ValueError(f"fitting_widths must be positive, got {self.fitting_widths}")
        if self.num_neighbors <= 0:
            raise ValueError(f"num_neighbors must be positive, got {self.num_neighbors}")


def smooth_switch(r: torch.Tensor, cutoff_smooth: float, cutoff: float) -> torch.Tensor:
    """DeePMD's switching ``sw(u) = u³(−6u² + 15u − 10) + 1``, ``u = (r − r_s)/(r_c − r_s)``
    clamped to [0, 1]: 1 below ``cutoff_smooth``, exactly 0 at and beyond ``cutoff``, with
    continuous first and second derivatives. Same shape and dtype as ``r``."""
    u = ((r - cutoff_smooth) / (cutoff - cutoff_smooth)).clamp(0.0, 1.0)
    return u**3 * (u * (-6.0 * u + 15.0) - 10.0) + 1.0


def _padded_slots(keys: torch.Tensor, count: int,
                  static: bool) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Where each row goes in a padded batch of blocks, one network per block.

    Rows are grouped by network (one stable sort); each group fills blocks of ``width``
    rows, its last one padded, so that the batch has at most about twice the rows however
    unequal the groups:

    * ``static=False``: ``width`` is the mean size of the groups present, ``⌈M / c⌉``
      (one host read of ``c``, the count of networks present), and the batch holds exactly
      the blocks the groups need;
    * ``static=True``: ``width = ⌈M / count⌉`` and the batch holds ``⌈M / width⌉ + count``
      blocks, what any grouping can need; blocks beyond the last group's are padding (the
      last network's, never read). Shapes depend on ``M`` and ``count`` only and nothing is
      read on the host, so a CUDA graph can capture it (smaller blocks when few networks
      are present: on CLN025 × 4, one CPU thread, the exact default model's forward and
      backward take 54 ms against 31).

    Parameters
    ----------
    keys : torch.Tensor, shape (M,), int64
        The network of each row, in ``[0, count)``.
    count : int
        Number of networks.
    static : bool
        Shapes fixed by ``M`` and ``count``, no host read.

    Returns
    -------
    network : torch.Tensor, shape (B,), int64
        The network of each block.
    slot : torch.Tensor, shape (M,), int64
        Row ``m``'s place in the flattened ``(B, width)`` batch.
    width : int
        Rows per block.
    """
    rows = keys.numel()
    sizes = torch.zeros(count, dtype=keys.dtype, device=keys.device).index_add_(
        0, keys, torch.ones_like(keys))
    if static:
        width = max(1, -(-rows // count))
        total = -(-rows // width) + count
    else:
        width = max(1, -(-rows // max(int(torch.count_nonzero(sizes)), 1)))
    blocks = (sizes + width - 1) // width  # per network
    ends = torch.cumsum(blocks, 0)
    if static:
        blocks_at = torch.arange(total, device=keys.device)
        network = torch.searchsorted(ends, blocks_at, right=True).clamp_(max=count - 1)
    else:
        network = torch.repeat_interleave(torch.arange(count, device=keys.device), blocks)
    order = torch.argsort(keys, stable=True)
    starts = torch.cumsum(sizes, 0) - sizes
    sorted_keys = keys.index_select(0, order)
    rank = torch.arange(rows, device=keys.device) - starts.index_select(0, sorted_keys)
    first_block = (ends - blocks).index_select(0, sorted_keys)
    place = (first_block + rank // width) * width + rank % width
    return network, torch.empty_like(keys).index_copy_(0, order, place), width


def _batched_mlp(x: torch.Tensor, keys: torch.Tensor, count: int, weights, biases,
                 act: nn.Module, skip, static: bool,
                 half: torch.dtype | None = None) -> torch.Tensor:
    """Each row of ``x`` through the network ``keys`` picks from stacks of ``count``
    networks: one batched matrix product per layer over blocks of rows of one network
    (`_padded_slots`).

    With ``half`` (``mlp_precision`` fp16 or bf16) each product takes its operands (the
    layer's input and weights) in that 16-bit type, accumulates in FP32 (the
    matrix-multiply routines' accumulator for 16-bit operands) and is rounded once to 16
    bits; bias, activation and shortcuts stay in ``x``'s dtype, as does everything around
    the network.

    Parameters
    ----------
    x : torch.Tensor, shape (M, w0)
    keys : torch.Tensor, shape (M,), int64
    count : int
    weights, biases : sequences of torch.Tensor, shapes (count, w_l, w_{l+1}), (count, w_{l+1})
    act : nn.Module
    skip : callable ``(layer, x, y) -> y``, the layer's shortcut
    static : bool
        Shapes fixed by ``M`` and ``count``, no host read (`_padded_slots`).
    half : torch.dtype, optional
        ``torch.float16`` or ``torch.bfloat16``: the products' operand type.

    Returns
    -------
    torch.Tensor, shape (M, w_last), ``x``'s dtype
    """
    network, slot, width = _padded_slots(keys, count, static)
    blocks = network.shape[0]
    h = x.new_zeros(blocks * width, x.shape[1]).index_copy_(0, slot, x)
    h = h.view(blocks, width, x.shape[1])
    for layer, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
        b = bias.index_select(0, network)[:, None]
        if half is None:
            y = torch.baddbmm(b, h, weight.index_select(0, network))
        else:
            w = weight.to(half).index_select(0, network)
            y = torch.bmm(h.to(half), w).to(h.dtype) + b
        h = skip(layer, h, act(y))
    return h.reshape(blocks * width, h.shape[-1]).index_select(0, slot)


def _embedding_skip(layer: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """DeePMD's embedding-net shortcut: ``y + x`` at equal widths, ``y + [x, x]`` where the
    width doubles, else ``y``."""
    if x.shape[-1] == y.shape[-1]:
        return y + x
    if 2 * x.shape[-1] == y.shape[-1]:
        return y + torch.cat([x, x], dim=-1)
    return y


def _fitting_skip(layer: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """DeePMD's fitting-net shortcut: ``y + x`` between hidden layers of equal width."""
    return y + x if layer > 0 and x.shape[-1] == y.shape[-1] else y


def _init_stack(nets: int, widths: list[int]) -> tuple[nn.ParameterList, nn.ParameterList]:
    """DeePMD's initialisation: weights ~ N(0, 1/(in + out)), biases ~ N(0, 1)."""
    weights, biases = nn.ParameterList(), nn.ParameterList()
    for a, b in zip(widths[:-1], widths[1:], strict=True):
        weights.append(nn.Parameter(torch.randn(nets, a, b) / math.sqrt(a + b)))
        biases.append(nn.Parameter(torch.randn(nets, b)))
    return weights, biases


class CGDeepPotential(nn.Module):
    """Deep Potential (se_e2_a) energy model over a batch of replica graphs (same interface
    as ``CGSchNet``).

    Parameters
    ----------
    config : DeepPotentialConfig
    """

    def __init__(self, config: DeepPotentialConfig | None = None):
        super().__init__()
        self.config = config = config or DeepPotentialConfig()
        types = config.embedding_size
        self.pair_nets = types if config.type_one_side else types * types
        self.embedding_weights, self.embedding_biases = _init_stack(
            self.pair_nets, [1, *config.embedding_widths])
        m1 = config.embedding_widths[-1]
        fitting = [m1 * config.axis_neurons, *config.fitting_widths]
        self.fitting_weights, self.fitting_biases = _init_stack(types, fitting)
        self.fitting_out = nn.Parameter(torch.randn(types, fitting[-1]) / math.sqrt(fitting[-1]))
        self.energy_bias = nn.Parameter(torch.zeros(types))
        self.activation = ACTIVATIONS[config.activation]()

    @property
    def output_parameters(self) -> tuple[nn.Parameter, nn.Parameter]:
        """``(fitting_out, energy_bias)``: every atomic energy is linear and homogeneous in
        them (`workbench.model.architectures.output_parameters`)."""
        return self.fitting_out, self.energy_bias

    @property
    def cutoff(self) -> float:
        """Graph radius r_c in Å."""
        return self.config.cutoff

    def environment(
        self, pos: torch.Tensor, graph: Graph
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows of the environment matrix, with padding slots made harmless.

        Parameters
        ----------
        pos : torch.Tensor, shape (N, 3)
        graph : Graph
            Padding slots (``valid`` False) get index 0 and a length beyond the cutoff.

        Returns
        -------
        s : torch.Tensor, shape (E,)
            ``s(r)``, 1/Å; zero for padding slots and at or beyond the cutoff.
        env : torch.Tensor, shape (E, 4)
            ``R̃_ij = s(r) [1, x/r, y/r, z/r]``, zero where ``s`` is.
        src, dst : torch.Tensor, shape (E,), int64
            Neighbour and centre of each edge, safe to gather with.
        """
        src, dst, valid = graph.src, graph.dst, graph.valid
        if valid is not None:
            src = torch.where(valid, src, 0)
            dst = torch.where(valid, dst, 0)
        diff = pos.index_select(0, src) - pos.index_select(0, dst)
        if valid is not None:  # a scalar fill: no host-to-device copy
            diff = torch.where(valid[:, None], diff, 2.0 * self.cutoff + 1.0)
        r = torch.linalg.vector_norm(diff, dim=-1)
        s = self.embedding_input(r)  # the embedding networks read s itself
        env = torch.cat([s[:, None], diff * (s / r)[:, None]], dim=-1)
        return s, env, src, dst

    def embedding_input(self, r: torch.Tensor) -> torch.Tensor:
        """``x``, the embedding networks' input, at pair distances ``r``: ``s(r)``.

        The tables are keyed on it (`embedding_input_range`), and the fused descriptor
        kernel (`kernels.dp_descriptor`) computes the same ``x``: a change here is a change
        there (`tests/model/test_deep_potential.py` compares the two paths).

        Parameters
        ----------
        r : torch.Tensor, shape (E,), float
            Å, positive.

        Returns
        -------
        torch.Tensor, shape (E,), 1/Å
            Zero at and beyond the cutoff.
        """
        return smooth_switch(r, self.config.cutoff_smooth, self.cutoff) / r

    def embedding_input_range(self) -> tuple[float, float]:
        """``(x_lo, x_hi)``: the range of `embedding_input` over distances in
        ``[TABLE_MIN_DISTANCE, r_c]`` (the domain of the embedding tables,
        `workbench.model.dp_tables`), from 4,001 distances in float64."""
        r = torch.linspace(TABLE_MIN_DISTANCE, self.cutoff, 4001, dtype=torch.float64)
        x = self.embedding_input(r)
        return float(x.min()), float(x.max())

    def embedding(self, s: torch.Tensor, net: torch.Tensor, static: bool = False,
                  half: torch.dtype | None = None) -> torch.Tensor:
        """``G``: each edge's ``s`` through the embedding network ``net`` of that edge.

        Parameters
        ----------
        s : torch.Tensor, shape (E,)
        net : torch.Tensor, shape (E,), int64
            Index of the edge's network, in ``[0, P)``.
        static : bool
            Grouping with shapes fixed by ``E`` and ``P``, no host read (`_padded_slots`).
        half : torch.dtype, optional
            16-bit operands of the products (`_batched_mlp`).

        Returns
        -------
        torch.Tensor, shape (E, M1)
        """
        return _batched_mlp(s[:, None], net, self.pair_nets, self.embedding_weights,
                            self.embedding_biases, self.activation, _embedding_skip, static,
                            half)

    def fitting(self, d: torch.Tensor, types: torch.Tensor, static: bool = False,
                half: torch.dtype | None = None) -> torch.Tensor:
        """Atomic energies: each bead's descriptor through its type's fitting network.

        Parameters
        ----------
        d : torch.Tensor, shape (N, M1·M2)
        types : torch.Tensor, shape (N,), int64
        static : bool
            Grouping with shapes fixed by ``N`` and ``T``, no host read (`_padded_slots`).
        half : torch.dtype, optional
            16-bit operands of the products (`_batched_mlp`); the last linear map and the
            energies stay in ``d``'s dtype.

        Returns
        -------
        torch.Tensor, shape (N,)
        """
        h = _batched_mlp(d, types, self.config.embedding_size, self.fitting_weights,
                         self.fitting_biases, self.activation, _fitting_skip, static, half)
        return (h * self.fitting_out.index_select(0, types)).sum(-1) + self.energy_bias[types]

    def descriptor(
        self, pos: torch.Tensor, types: torch.Tensor, graph: Graph,
        table: EmbeddingTable | None = None, static: bool = False,
        half: torch.dtype | None = None,
    ) -> torch.Tensor:
        """The se_e2_a descriptor ``D_i``, flattened.

        Parameters
        ----------
        pos : torch.Tensor, shape (N, 3)
        types : torch.Tensor, shape (N,), int64
        graph : Graph
        table : EmbeddingTable, optional
            Read the embedding networks from their tables (rows in ``pos``' dtype) instead
            of evaluating them.
        static : bool
            Group the edges for the exact networks with fixed shapes, no host read.
        half : torch.dtype, optional
            16-bit operands of the exact embedding networks' products (`_batched_mlp`).

        Returns
        -------
        torch.Tensor, shape (N, M1·M2)
        """
        s, env, src, dst = self.environment(pos, graph)
        t_src = types.index_select(0, src)
        net = t_src if self.config.type_one_side else (
            types.index_select(0, dst) * self.config.embedding_size + t_src)
        g = (self.embedding(s, net, static, half) if table is None
             else tabulated_embedding(table, s, net))
        m1 = g.shape[-1]
        a = pos.new_zeros(pos.shape[0], m1, 4).index_add_(0, dst, g[:, :, None] * env[:, None])
        return self.contract(a / self.config.num_neighbors)

    def contract(self, a: torch.Tensor) -> torch.Tensor:
        """``D_i = A_i A_i^<T``, flattened.

        Parameters
        ----------
        a : torch.Tensor, shape (N, M1, 4)
            ``A_i``.

        Returns
        -------
        torch.Tensor, shape (N, M1·M2)
        """
        d = a @ a[:, : self.config.axis_neurons].transpose(1, 2)
        return d.reshape(a.shape[0], a.shape[1] * self.config.axis_neurons)

    def fused_descriptor(self, pos: torch.Tensor, types: torch.Tensor, graph: Graph,
                         table: EmbeddingTable) -> torch.Tensor:
        """`descriptor` with ``A_i`` from the fused kernel (`kernels.dp_descriptor`: per
        destination, its CSR segment's environment rows and tabulated embeddings summed in
        registers; the backward writes one vector per edge).

        Parameters
        ----------
        pos : torch.Tensor, shape (N, 3), float32
        types : torch.Tensor, shape (N,), int64
        graph : Graph
            Edges at or beyond the cutoff and padding slots become padding of the CSR
            layouts (`workbench.model.fused_schnet.real_edge_graph`, no host read).
        table : EmbeddingTable
            The embedding networks' table on ``pos``' device.

        Returns
        -------
        torch.Tensor, shape (N, M1·M2)
        """
        from kernels.dp_descriptor import DescriptorSpec, dp_descriptor

        config = self.config
        src, dst, csr, _ = real_edge_graph(self, pos, graph)
        spec = DescriptorSpec(config.cutoff_smooth, config.cutoff, config.embedding_size,
                              config.type_one_side, config.num_neighbors, table.lower,
                              table.width)
        return self.contract(dp_descriptor(pos, types, src, dst, csr, table.table, spec))

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
        pos : torch.Tensor, shape (N, 3), float32 or float64
            Flattened positions of all replicas, Å.
        types : torch.Tensor, shape (N,), int64
            Bead types.
        graph : Graph
            Directed edges (``src`` → ``dst``, ``dst`` the centre); edges at or beyond the
            cutoff and padding slots contribute nothing.
        options : KernelOptions, optional
            ``tabulated_filter`` reads the embedding networks from their tables
            (`workbench.model.dp_tables`); ``fused_message_passing`` computes ``A`` in
            the fused descriptor kernel, which reads the embedding from those tables
            whether or not ``tabulated_filter`` is on (`fused_descriptor`, where
            `fused_descriptor_problem` finds nothing, else with a one-time warning the
            path without it); with ``cuda_graph`` the networks' rows are
            grouped with fixed shapes and no host read (`_padded_slots`), so that the step
            can be captured; ``mlp_precision`` fp16 or bf16 runs the fitting networks and
            the exact embedding networks with 16-bit operands (`_batched_mlp`; FP32 for
            everything else). Techniques this network has no path for are ignored with a
            one-time warning.

        Returns
        -------
        torch.Tensor, shape (N,)
        """
        table, static, half, fused = None, options is not None and options.cuda_graph, None, False
        if options is not None:
            own = implemented_techniques("dp")
            missing = [name for name in options.enabled()
                       if name not in own and not name.startswith("mlp_")]
            if missing:
                from workbench.model.fused_schnet import warn_fallback_once

                warn_fallback_once(f"CGDeepPotential has no fused kernels for "
                                   f"{', '.join(missing)}")
            if options.mlp_precision != "fp32":
                half = PRECISION_DTYPES[options.mlp_precision]
            if options.fused_message_passing:
                problem = fused_descriptor_problem(self, pos.device, options)
                if problem is None and pos.dtype != torch.float32:
                    problem = f"the DP descriptor kernel takes float32 positions, not {pos.dtype}"
                fused = problem is None
                if problem is not None:
                    from workbench.model.fused_schnet import warn_fallback_once

                    warn_fallback_once(problem)
            if options.tabulated_filter or fused:
                table = embedding_table(self, pos.dtype, pos.device)
        if fused:
            d = self.fused_descriptor(pos, types, graph, table)
        else:
            d = self.descriptor(pos, types, graph, table, static, half)
        return self.fitting(d, types, static, half)


def fused_descriptor_problem(model: CGDeepPotential, device: torch.device,
                             options: KernelOptions) -> str | None:
    """Why CGDeepPotential's Triton techniques cannot run on ``device``, or None if they can
    (the counterpart of `workbench.model.fused_schnet.fused_path_problem`): Triton on the
    device and float32 weights; with ``fused_message_passing``, a power-of-two last
    embedding width >= 16. Its tables and 16-bit networks (`workbench.model.dp_tables`,
    `_batched_mlp`) run in PyTorch whatever this says."""
    fused = options.fused_message_passing
    widths = {"last embedding width": model.config.embedding_widths[-1]} if fused else None
    return kernel_device_problem(model, device, options, "the DP descriptor kernel", widths)
