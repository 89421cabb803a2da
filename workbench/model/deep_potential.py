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
``N_c`` is a fixed normalisation (``num_neighbors``, DeePMD's ``Σ sel``). ``M1`` is the last
embedding width, ``M2`` is ``axis_neurons``.

With ``sel`` (DeePMD's padded neighbour lists: ``sel[t]`` slots per neighbour type) the
rows are normalised by per-centre-type statistics, ``R̂_ij = (R̃_ij − μ_{t_i}) / σ_{t_i}``
(buffers ``env_mean``, ``env_std``, shape (T, 4); identity until set), the embedding reads
``ŝ = R̂_ij[0]``, and every slot of a list counts, the empty ones with the normalised zero
row ``R̂⁰ = −μ/σ``::

    c_{t_i t_j} = G_{t_i t_j}(R̂⁰[0]) ⊗ R̂⁰                 an empty slot (`empty_slots`)
    A_i = (1/N_c) [Σ_t sel_t c_{t_i t} + Σ_j (G_ij ⊗ R̂_ij − c_{t_i t_j})]

so an edge at or beyond ``r_c`` (``R̃ = 0``) still adds exactly nothing, and deepmd-kit's
energies are reproduced while no bead has more than ``sel_t`` neighbours of type ``t`` (the
farther of which deepmd-kit drops). Without ``sel``: ``R̂ = R̃``, no empty slots.

Networks follow deepmd-kit's PyTorch backend. A layer from width ``a`` to ``b`` computes
``y = act(x W + c)``, times a trainable timestep ``idt`` with ``resnet_dt``, plus ``x``
where ``b = a`` or ``[x, x]`` where ``b = 2a`` (`shortcut`): every layer of an embedding
network (widths ``[1, w1, ..., wk]``) and of a fitting network (widths
``[M1·M2, v1, ..., vm]``), whose last linear map to one value has no shortcut. One embedding
network per ordered type pair ``(t_i, t_j)``, or per neighbour type ``t_j`` with
``type_one_side``; one fitting network per centre type. deepmd-kit's models convert to and
from this one exactly, and deepmd-kit can evaluate it (``backend``;
`workbench.model.deepmd_interop`).

Module tree (parameters stacked over networks; ``P`` = T² pairs, or T with
``type_one_side``; ``T`` = ``embedding_size``)::

    embedding_weights.{l}    (P, w_l, w_{l+1})     layer l of every embedding network
    embedding_biases.{l}     (P, w_{l+1})
    fitting_weights.{l}      (T, v_l, v_{l+1})     v = [M1·M2, fitting widths...]
    fitting_biases.{l}       (T, v_{l+1})
    fitting_out              (T, v_last)           last linear map, no bias
    energy_bias              (T,)                  per-type atomic energy, zero at start
    embedding_timesteps.{l}  (P, w_{l+1})          with resnet_dt, layers with a shortcut
    fitting_timesteps.{l}    (T, v_{l+1})          likewise
    env_mean, env_std        (T, 4)                with sel: statistics per centre type

* **Invariance**: ``D_i`` reads distances through ``s`` and ``G``, and directions through
  ``A_i A_i^<T``, a product of two ``M1×4``/``M2×4`` matrices whose 4-dim index contracts;
  a rotation acts on the last three columns of every ``R̃_ij`` alike and cancels (so do
  reflections); translations leave ``r_ij`` unchanged; the sums over neighbours and over
  beads do not depend on their order. Forces by autograd are equivariant.
* **Padding and the cutoff**: padding slots get index 0 and a length beyond ``r_c``, so
  ``s = 0`` and ``R̃_ij = 0``: their (finite) embedding is multiplied by zero, in the
  energy and in its gradient, as for edges at or beyond ``r_c``. ``s`` and ``s'`` vanish
  at ``r_c``, so a pair crossing the cutoff changes neither energy nor forces.

Evaluation: edges are grouped by embedding network (one stable sort, one host read of the
group sizes) into blocks of equal length, one network per block, and each layer is one
batched matrix product over the blocks with their networks' weights gathered
(`_batched_mlp`); beads likewise by fitting network. No dense neighbour matrices:
``A_i`` is an ``index_add_`` of per-edge outer products onto ``dst``. No Triton kernels
(``Architecture.fused`` is empty); DeePMD's compressed (tabulated) embedding and fused
descriptor kernels are planned (``docs/deep-potential.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from workbench.model.force_paths import STEP_TECHNIQUES
from workbench.model.network_config import ACTIVATIONS, NetworkConfig
from workbench.model.options import KernelOptions
from workbench.neighbors import Graph

#: Who evaluates the network (``CGDeepPotential.backend``): the engine's own path, or
#: deepmd-kit's PyTorch model built from the same weights (`workbench.model.deepmd_interop`).
DP_BACKENDS = ("engine", "deepmd")


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
        One of ``ACTIVATIONS`` (``"tanh"`` as in DeePMD), of both kinds of network.
    embedding_resnet_dt : bool
        A trainable per-channel timestep ``idt`` scales the activation of every embedding
        layer that has a shortcut (the descriptor's ``resnet_dt``).
    fitting_resnet_dt : bool
        The same for the fitting networks (``fitting_net.resnet_dt``).
    sel : list of int or None
        DeePMD's padded neighbour lists: ``sel[t]`` slots for neighbours of bead type ``t``
        (length ``embedding_size``; ``num_neighbors`` must be their sum). With it the
        environment matrix is normalised by the per-centre-type statistics ``env_mean``
        and ``env_std`` (buffers, identity until set, e.g. by a converted deepmd-kit
        model; as DeePMD's, zero means and one deviation for the three direction columns,
        which keeps the model rotation invariant) and every empty slot of a list
        contributes as in DeePMD. None: no lists, no statistics (``s`` and ``R̃`` enter as
        they are).
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
    embedding_resnet_dt: bool = False
    fitting_resnet_dt: bool = False
    sel: list[int] | None = None

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
        if self.sel is not None:
            if len(self.sel) != self.embedding_size or min(self.sel) < 0:
                raise ValueError(f"sel must give a count >= 0 for each of the "
                                 f"{self.embedding_size} bead types, got {self.sel}")
            if sum(self.sel) != self.num_neighbors:
                raise ValueError(f"num_neighbors must be the sum of sel ({sum(self.sel)}), "
                                 f"got {self.num_neighbors}")


def smooth_switch(r: torch.Tensor, cutoff_smooth: float, cutoff: float) -> torch.Tensor:
    """DeePMD's switching ``sw(u) = u³(−6u² + 15u − 10) + 1``, ``u = (r − r_s)/(r_c − r_s)``
    clamped to [0, 1]: 1 below ``cutoff_smooth``, exactly 0 at and beyond ``cutoff``, with
    continuous first and second derivatives. Same shape and dtype as ``r``."""
    u = ((r - cutoff_smooth) / (cutoff - cutoff_smooth)).clamp(0.0, 1.0)
    return u**3 * (u * (-6.0 * u + 15.0) - 10.0) + 1.0


def _padded_slots(keys: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Where each row goes in a padded batch of blocks, one network per block.

    Rows are grouped by network; each group fills blocks of ``width`` rows (its last one
    padded), ``width`` the mean group size, so that padding at most doubles the rows
    however unequal the groups.

    Parameters
    ----------
    keys : torch.Tensor, shape (M,), int64
        The network of each row, in ``[0, count)``.
    count : int
        Number of networks.

    Returns
    -------
    network : torch.Tensor, shape (B,), int64
        The network of each block.
    slot : torch.Tensor, shape (M,), int64
        Row ``m``'s place in the flattened ``(B, width)`` batch.
    width : int
        Rows per block (one host read of the group sizes).
    """
    sizes = torch.bincount(keys, minlength=count)
    present = int(torch.count_nonzero(sizes))
    width = max(1, -(-keys.numel() // max(present, 1)))
    blocks = (sizes + width - 1) // width  # per network
    network = torch.repeat_interleave(torch.arange(count, device=keys.device), blocks)
    first_block = torch.cumsum(blocks, 0) - blocks
    order = torch.argsort(keys, stable=True)
    starts = torch.cumsum(sizes, 0) - sizes
    sorted_keys = keys.index_select(0, order)
    rank = torch.arange(keys.numel(), device=keys.device) - starts.index_select(0, sorted_keys)
    place = (first_block.index_select(0, sorted_keys) + rank // width) * width + rank % width
    return network, torch.empty_like(keys).index_copy_(0, order, place), width


def _batched_mlp(x: torch.Tensor, keys: torch.Tensor, count: int, weights, biases,
                 act: nn.Module, timesteps) -> torch.Tensor:
    """Each row of ``x`` through the network ``keys`` picks from stacks of ``count``
    networks: one batched matrix product per layer over blocks of rows of one network
    (`_padded_slots`). A layer computes ``y = act(x W + c)``, times the layer's timestep
    where it has one, plus DeePMD's shortcut (`shortcut`).

    Parameters
    ----------
    x : torch.Tensor, shape (M, w0)
    keys : torch.Tensor, shape (M,), int64
    count : int
    weights, biases : sequences of torch.Tensor, shapes (count, w_l, w_{l+1}), (count, w_{l+1})
    act : nn.Module
    timesteps : nn.ParameterDict
        ``str(l)`` to shape (count, w_{l+1}) for the layers with a timestep.

    Returns
    -------
    torch.Tensor, shape (M, w_last)
    """
    network, slot, width = _padded_slots(keys, count)
    blocks = network.shape[0]
    h = x.new_zeros(blocks * width, x.shape[1]).index_copy_(0, slot, x)
    h = h.view(blocks, width, x.shape[1])
    for layer, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
        y = act(torch.baddbmm(bias.index_select(0, network)[:, None], h,
                              weight.index_select(0, network)))
        if str(layer) in timesteps:
            y = y * timesteps[str(layer)].index_select(0, network)[:, None]
        skip = shortcut(h, y.shape[-1])
        h = y if skip is None else y + skip
    return h.reshape(blocks * width, h.shape[-1]).index_select(0, slot)


def shortcut(x: torch.Tensor, width: int) -> torch.Tensor | None:
    """DeePMD's ResNet-like shortcut of a layer from ``x`` to ``width`` channels (both kinds
    of network, every layer but the fitting networks' output): ``x`` at equal widths,
    ``[x, x]`` where the width doubles, else None."""
    if x.shape[-1] == width:
        return x
    if 2 * x.shape[-1] == width:
        return torch.cat([x, x], dim=-1)
    return None


def _init_stack(nets: int, widths: list[int], resnet_dt: bool
                ) -> tuple[nn.ParameterList, nn.ParameterList, nn.ParameterDict]:
    """DeePMD's initialisation: weights ~ N(0, 1/(in + out)), biases ~ N(0, 1), and with
    ``resnet_dt`` timesteps ~ N(0.1, 0.001²) for the layers with a shortcut."""
    weights, biases, timesteps = nn.ParameterList(), nn.ParameterList(), nn.ParameterDict()
    for layer, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        weights.append(nn.Parameter(torch.randn(nets, a, b) / math.sqrt(a + b)))
        biases.append(nn.Parameter(torch.randn(nets, b)))
        if resnet_dt and b in (a, 2 * a):
            timesteps[str(layer)] = nn.Parameter(0.1 + 0.001 * torch.randn(nets, b))
    return weights, biases, timesteps


class CGDeepPotential(nn.Module):
    """Deep Potential (se_e2_a) energy model over a batch of replica graphs (same interface
    as ``CGSchNet``).

    Parameters
    ----------
    config : DeepPotentialConfig
    backend : str
        One of `DP_BACKENDS`; a run-time switch, also settable later as
        ``network.backend``, read at every forward. ``"deepmd"`` needs deepmd-kit and
        ``config.sel`` (`workbench.model.deepmd_interop.DeepmdBackend`).
    """

    def __init__(self, config: DeepPotentialConfig | None = None, backend: str = "engine"):
        super().__init__()
        self.backend = backend
        self._deepmd = None
        self.config = config = config or DeepPotentialConfig()
        types = config.embedding_size
        self.pair_nets = types if config.type_one_side else types * types
        (self.embedding_weights, self.embedding_biases,
         self.embedding_timesteps) = _init_stack(self.pair_nets, [1, *config.embedding_widths],
                                                 config.embedding_resnet_dt)
        m1 = config.embedding_widths[-1]
        fitting = [m1 * config.axis_neurons, *config.fitting_widths]
        (self.fitting_weights, self.fitting_biases,
         self.fitting_timesteps) = _init_stack(types, fitting, config.fitting_resnet_dt)
        self.fitting_out = nn.Parameter(torch.randn(types, fitting[-1]) / math.sqrt(fitting[-1]))
        self.energy_bias = nn.Parameter(torch.zeros(types))
        self.activation = ACTIVATIONS[config.activation]()
        if config.sel is not None:
            self.register_buffer("env_mean", torch.zeros(types, 4))
            self.register_buffer("env_std", torch.ones(types, 4))
            self.register_buffer("slot_counts", torch.tensor(config.sel, dtype=torch.float32),
                                 persistent=False)

    @property
    def backend(self) -> str:
        """Who evaluates the network (`DP_BACKENDS`)."""
        return self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        if name not in DP_BACKENDS:
            raise ValueError(f"unknown Deep Potential backend {name!r}; choose from "
                             f"{', '.join(DP_BACKENDS)}")
        self._backend = name

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
        s = smooth_switch(r, self.config.cutoff_smooth, self.cutoff) / r
        env = torch.cat([s[:, None], diff * (s / r)[:, None]], dim=-1)
        return s, env, src, dst

    def embedding(self, s: torch.Tensor, net: torch.Tensor) -> torch.Tensor:
        """``G``: each edge's ``s`` through the embedding network ``net`` of that edge.

        Parameters
        ----------
        s : torch.Tensor, shape (E,)
        net : torch.Tensor, shape (E,), int64
            Index of the edge's network, in ``[0, P)``.

        Returns
        -------
        torch.Tensor, shape (E, M1)
        """
        return _batched_mlp(s[:, None], net, self.pair_nets, self.embedding_weights,
                            self.embedding_biases, self.activation, self.embedding_timesteps)

    def fitting(self, d: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """Atomic energies: each bead's descriptor through its type's fitting network.

        Parameters
        ----------
        d : torch.Tensor, shape (N, M1·M2)
        types : torch.Tensor, shape (N,), int64

        Returns
        -------
        torch.Tensor, shape (N,)
        """
        h = _batched_mlp(d, types, self.config.embedding_size, self.fitting_weights,
                         self.fitting_biases, self.activation, self.fitting_timesteps)
        return (h * self.fitting_out.index_select(0, types)).sum(-1) + self.energy_bias[types]

    def descriptor(
        self, pos: torch.Tensor, types: torch.Tensor, graph: Graph
    ) -> torch.Tensor:
        """The se_e2_a descriptor ``D_i``, flattened.

        Parameters
        ----------
        pos : torch.Tensor, shape (N, 3)
        types : torch.Tensor, shape (N,), int64
        graph : Graph

        Returns
        -------
        torch.Tensor, shape (N, M1·M2)
        """
        s, env, src, dst = self.environment(pos, graph)
        t_src, t_dst = types.index_select(0, src), types.index_select(0, dst)
        size = self.config.embedding_size
        net = t_src if self.config.type_one_side else t_dst * size + t_src
        if self.config.sel is None:
            g = self.embedding(s, net)
            a = pos.new_zeros(pos.shape[0], g.shape[-1], 4).index_add_(
                0, dst, g[:, :, None] * env[:, None])
        else:
            env = (env - self.env_mean.index_select(0, t_dst)) / self.env_std.index_select(0, t_dst)
            g = self.embedding(env[:, 0], net)
            empty = self.empty_slots()
            rows = torch.where((s > 0)[:, None, None], g[:, :, None] * env[:, None]
                               - empty.index_select(0, t_dst * size + t_src), 0.0)
            lists = (empty.view(size, size, *empty.shape[1:])
                     * self.slot_counts.to(empty.dtype)[None, :, None, None]).sum(1)
            a = lists.index_select(0, types).index_add_(0, dst, rows)
        a = a / self.config.num_neighbors
        d = a @ a[:, : self.config.axis_neurons].transpose(1, 2)
        return d.reshape(pos.shape[0], a.shape[1] * self.config.axis_neurons)

    def empty_slots(self) -> torch.Tensor:
        """What an empty slot of DeePMD's neighbour lists adds to ``A_i`` (times ``N_c``):
        ``G(ŝ₀) ⊗ R̂₀`` with ``R̂₀ = −env_mean / env_std`` of the centre type (the
        normalised environment-matrix row of a zero row), ``ŝ₀`` its first entry, ``G`` the
        embedding network of the pair. Zero with the identity statistics. Only with ``sel``.

        Returns
        -------
        torch.Tensor, shape (T², M1, 4)
            Row ``t_i·T + t_j`` for a centre of type ``t_i`` and a slot for type ``t_j``.
        """
        size = self.config.embedding_size
        centre = torch.arange(size, device=self.env_mean.device).repeat_interleave(size)
        slot = torch.arange(size, device=self.env_mean.device).repeat(size)
        row = (-self.env_mean / self.env_std).index_select(0, centre)
        net = slot if self.config.type_one_side else centre * size + slot
        return self.embedding(row[:, 0], net)[:, :, None] * row[:, None]

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
            The engine's Triton techniques have no kernels for this network; those asked
            for (but the MD step's own) are ignored with a one-time warning.

        Returns
        -------
        torch.Tensor, shape (N,)
            Of ``self.backend``: the engine's path, or deepmd-kit's model.
        """
        if options is not None:
            missing = [name for name in options.enabled() if name not in STEP_TECHNIQUES]
            if missing:
                from workbench.model.fused_schnet import warn_fallback_once

                warn_fallback_once(f"CGDeepPotential has no fused kernels for "
                                   f"{', '.join(missing)}")
        if self.backend == "deepmd":
            if self._deepmd is None:
                from workbench.model.deepmd_interop import DeepmdBackend

                self._deepmd = DeepmdBackend()
            return self._deepmd.node_energies(self, pos, types, graph)
        return self.fitting(self.descriptor(pos, types, graph), types)
