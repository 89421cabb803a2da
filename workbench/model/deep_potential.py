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
``x = ŝ = R̂_ij[0]`` (`embedding_input`; ``x = s`` without ``sel``), and every slot of a
list counts, the empty ones with the normalised zero row ``R̂⁰ = −μ/σ``::

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
  ``s = 0`` and ``R̃_ij = 0``: their (finite) embedding is multiplied by zero (with
  ``sel``, their term is masked), in the energy and in its gradient, as for edges at or
  beyond ``r_c``. ``s`` and ``s'`` vanish
  at ``r_c``, so a pair crossing the cutoff changes neither energy nor forces.

Evaluation: edges are grouped by embedding network (one stable sort) into blocks of equal
length, one network per block, and each layer is one batched matrix product over the
blocks with their networks' weights gathered (`_batched_mlp`); beads likewise by fitting
network (`_padded_slots`: one host read of the number of networks present, or, with
``cuda_graph``, shapes fixed by the numbers of rows and networks and no host read). No
dense neighbour matrices: ``A_i`` is an ``index_add_`` of per-edge outer products onto
``dst``. Fast paths (`forward`'s options, ``docs/deep-potential.md``): ``tabulated_filter``
reads the embedding networks from cubic tables keyed on their input ``x``
(`embedding_input`; `workbench.model.dp_tables`, DeePMD's model compression);
``fused_message_passing`` computes ``A_i``, reading them, in one Triton kernel per
destination (`kernels.dp_descriptor`, given the statistics and the empty slots' embeddings
with ``sel``); ``mlp_precision`` runs the networks' products on 16-bit operands;
``cuda_graph`` groups rows with fixed shapes so that whole steps can be captured. Every
path computes the same formulas, ``sel``'s statistics and empty slots and ``resnet_dt``'s
timesteps included; deepmd-kit's own model is the other ``backend``.
"""

from __future__ import annotations

import importlib
import math
import warnings
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
from workbench.model.force_paths import STEP_TECHNIQUES, implemented_techniques
from workbench.model.fused_schnet import (
    PRECISION_DTYPES,
    kernel_device_problem,
    real_edge_graph,
    warn_fallback_once,
)
from workbench.model.geometry import edge_vectors
from workbench.model.network_config import ACTIVATIONS, NetworkConfig
from workbench.model.options import KernelOptions
from workbench.neighbors import Graph, cell_list_pairs

#: Who evaluates the network (``CGDeepPotential.backend``): the engine's own path, or
#: deepmd-kit's PyTorch model built from the same weights (`workbench.model.deepmd_interop`).
DP_BACKENDS = ("engine", "deepmd")

#: Factor on the most neighbours of a type in a structure that `structure_sel` gives as that
#: type's slots: room for the denser packing of a run.
SEL_HEADROOM = 1.5

#: Where the ``"deepmd"`` backend's evaluator lives (``module``, ``class``), imported by name
#: when first used: that module imports this one.
DEEPMD_EVALUATOR = ("workbench.model.deepmd_interop", "DeepmdBackend")


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


def structure_sel(positions: torch.Tensor, types: torch.Tensor, cutoff: float,
                  embedding_size: int, headroom: float = SEL_HEADROOM) -> list[int]:
    """deepmd-kit's neighbour slots (``sel``) for a structure: per bead type ``t``, the most
    neighbours of type ``t`` that any bead has within ``cutoff``, times ``headroom``,
    rounded up; at least one slot for a type of the structure, none for the others.

    Parameters
    ----------
    positions : torch.Tensor, shape (N, 3)
        Å (a cell-list search, `workbench.neighbors.cell_list_pairs`, so large systems of
        copies cost ``O(N)``).
    types : torch.Tensor, shape (N,), int64
        Bead types, in ``[0, embedding_size)``.
    cutoff : float
        r_c, Å.
    embedding_size : int
        T, the length of ``sel``.
    headroom : float
        At least 1.

    Returns
    -------
    list of int
        Length ``embedding_size``; the config's ``num_neighbors`` must be its sum.
    """
    if headroom < 1.0:
        raise ValueError(f"headroom must be at least 1, got {headroom}")
    types = types.to(torch.long).cpu()
    src, dst = cell_list_pairs(positions.detach().float().cpu(), cutoff)
    counts = torch.bincount(dst * embedding_size + types.index_select(0, src),
                            minlength=types.numel() * embedding_size)
    most = counts.view(-1, embedding_size).amax(0)
    present = torch.bincount(types, minlength=embedding_size) > 0
    return [max(math.ceil(headroom * int(n)), int(here))
            for n, here in zip(most.tolist(), present.tolist(), strict=True)]


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
                 act: nn.Module, timesteps, static: bool,
                 half: torch.dtype | None = None) -> torch.Tensor:
    """Each row of ``x`` through the network ``keys`` picks from stacks of ``count``
    networks: one batched matrix product per layer over blocks of rows of one network
    (`_padded_slots`). A layer computes ``y = act(x W + c)``, times the layer's timestep
    where it has one, plus DeePMD's shortcut (`shortcut`).

    With ``half`` (``mlp_precision`` fp16 or bf16) each product takes its operands (the
    layer's input and weights) in that 16-bit type, accumulates in FP32 (the
    matrix-multiply routines' accumulator for 16-bit operands) and is rounded once to 16
    bits; bias, activation, timesteps and shortcuts stay in ``x``'s dtype, as does
    everything around the network.

    Parameters
    ----------
    x : torch.Tensor, shape (M, w0)
    keys : torch.Tensor, shape (M,), int64
    count : int
    weights, biases : sequences of torch.Tensor, shapes (count, w_l, w_{l+1}), (count, w_{l+1})
    act : nn.Module
    timesteps : nn.ParameterDict
        ``str(l)`` to shape (count, w_{l+1}) for the layers with a timestep.
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
            y = act(torch.baddbmm(b, h, weight.index_select(0, network)))
        else:
            w = weight.to(half).index_select(0, network)
            y = act(torch.bmm(h.to(half), w).to(h.dtype) + b)
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
        self._slot_mean_key = None  # (env_mean's storage, version) of `_empty_slots_add`
        self._slots_add = False
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
        # x_src − x_dst: the neighbour seen from the centre (the endpoints' roles swapped)
        diff, dst, src = edge_vectors(pos, graph.dst, graph.src, graph.valid, self.cutoff)
        r = torch.linalg.vector_norm(diff, dim=-1)
        s = smooth_switch(r, self.config.cutoff_smooth, self.cutoff) / r
        env = torch.cat([s[:, None], diff * (s / r)[:, None]], dim=-1)
        return s, env, src, dst

    def embedding_input(self, s: torch.Tensor, centre: torch.Tensor) -> torch.Tensor:
        """``x``, the embedding networks' input: ``s`` itself, or with ``sel`` its
        normalised value ``R̂_ij[0] = (s − μ_{t_i,0}) / σ_{t_i,0}`` (`normalised_environment`).

        The tables are keyed on ``x`` (`embedding_input_range`), and the fused descriptor
        kernel (`kernels.dp_descriptor`) computes the same ``x`` from the statistics it is
        given: a change here is a change there (`tests/model/test_deep_potential.py` and
        `tests/model/test_deepmd_interop.py` compare the paths).

        Parameters
        ----------
        s : torch.Tensor, shape (E,), float
            ``s(r)``, 1/Å.
        centre : torch.Tensor, shape (E,), int64
            The centre bead's type ``t_i``.

        Returns
        -------
        torch.Tensor, shape (E,), ``s``'s dtype
        """
        if self.config.sel is None:
            return s
        mean, std = self.env_mean[:, 0], self.env_std[:, 0]
        return (s - mean.index_select(0, centre)) / std.index_select(0, centre)

    def normalised_environment(self, env: torch.Tensor, centre: torch.Tensor) -> torch.Tensor:
        """``R̂_ij = (R̃_ij − μ_{t_i}) / σ_{t_i}`` with ``sel`` (column 0 is
        `embedding_input`), else ``R̃_ij`` itself.

        Parameters
        ----------
        env : torch.Tensor, shape (E, 4)
            ``R̃`` rows.
        centre : torch.Tensor, shape (E,), int64
            The centre bead's type ``t_i``.

        Returns
        -------
        torch.Tensor, shape (E, 4), ``env``'s dtype
        """
        if self.config.sel is None:
            return env
        mean, std = self.env_mean[:, 1:], self.env_std[:, 1:]
        directions = (env[:, 1:] - mean.index_select(0, centre)) / std.index_select(0, centre)
        return torch.cat([self.embedding_input(env[:, 0], centre)[:, None], directions], 1)

    def embedding_input_range(self) -> tuple[float, float]:
        """``(x_lo, x_hi)``: the range of `embedding_input` over distances in
        ``[TABLE_MIN_DISTANCE, r_c]`` and every centre type (the domain of the embedding
        tables, `workbench.model.dp_tables`; with ``sel`` it holds every type's empty-slot
        input ``x(r_c)``), from 4,001 distances in float64."""
        device = self.fitting_out.device
        r = torch.linspace(TABLE_MIN_DISTANCE, self.cutoff, 4001, dtype=torch.float64,
                           device=device)
        s = smooth_switch(r, self.config.cutoff_smooth, self.cutoff) / r
        types = self.config.embedding_size
        centre = torch.arange(types, device=device).repeat_interleave(r.numel())
        x = self.embedding_input(s.repeat(types), centre)
        return float(x.min()), float(x.max())

    def embedding(self, x: torch.Tensor, net: torch.Tensor, static: bool = False,
                  half: torch.dtype | None = None) -> torch.Tensor:
        """``G``: each edge's input ``x`` through the embedding network ``net`` of that edge.

        Parameters
        ----------
        x : torch.Tensor, shape (E,)
            `embedding_input`.
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
        return _batched_mlp(x[:, None], net, self.pair_nets, self.embedding_weights,
                            self.embedding_biases, self.activation, self.embedding_timesteps,
                            static, half)

    def embedding_of(self, x: torch.Tensor, net: torch.Tensor,
                     table: EmbeddingTable | None, static: bool,
                     half: torch.dtype | None) -> torch.Tensor:
        """``G`` from the exact networks (`embedding`), or read from ``table``
        (`workbench.model.dp_tables.tabulated_embedding`, which ignores ``static`` and
        ``half``). Shapes as `embedding`'s."""
        if table is None:
            return self.embedding(x, net, static, half)
        return tabulated_embedding(table, x, net)

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
                         self.fitting_biases, self.activation, self.fitting_timesteps, static,
                         half)
        return (h * self.fitting_out.index_select(0, types)).sum(-1) + self.energy_bias[types]

    def pair_network(self, centre: torch.Tensor, neighbour: torch.Tensor) -> torch.Tensor:
        """The embedding network of each (centre type, neighbour type): ``t_i T + t_j``, or
        ``t_j`` with ``type_one_side``. Shape and dtype (int64) of ``neighbour``."""
        if self.config.type_one_side:
            return neighbour
        return centre * self.config.embedding_size + neighbour

    def empty_slots(self, table: EmbeddingTable | None = None, static: bool = False,
                    half: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """What an empty slot of DeePMD's neighbour lists holds (only with ``sel``): the
        normalised row of a zero row of ``R̃``, ``R̂⁰ = −μ/σ`` of the centre type, and its
        embedding ``G(R̂⁰[0])`` by the pair's network; the slot adds ``G(R̂⁰[0]) ⊗ R̂⁰`` to
        ``A_i`` (times ``N_c``). Both vanish with the identity statistics.

        Parameters
        ----------
        table, static, half
            As for the edges (`descriptor`), so that a pair crossing the cutoff, whose row
            becomes an empty slot's, adds the same on either side of it.

        Returns
        -------
        embedded : torch.Tensor, shape (T², M1)
            Row ``t_i·T + t_j``: a centre of type ``t_i``, a slot for type ``t_j``.
        origin : torch.Tensor, shape (T, 4)
            ``R̂⁰`` per centre type.
        """
        size = self.config.embedding_size
        types = torch.arange(size, device=self.env_mean.device)
        centre, slot = types.repeat_interleave(size), types.repeat(size)
        origin = -self.env_mean / self.env_std
        x = origin[:, 0].index_select(0, centre)
        return self.embedding_of(x, self.pair_network(centre, slot), table, static,
                                 half), origin

    def empty_slots_add(self) -> bool:
        """Whether deepmd-kit's empty slots add anything to ``A_i``: with ``sel``, and a
        centre type whose mean row ``μ`` is not zero (an empty slot holds ``R̂⁰ = −μ/σ``).
        The identity statistics (a demo model, one whose statistics were never set) add
        nothing, so its paths skip the empty slots' work. Read on the host once per change
        of ``env_mean`` (at the first evaluation, before any capture)."""
        if self.config.sel is None:
            return False
        key = (self.env_mean.data_ptr(), self.env_mean._version)
        if key != self._slot_mean_key:
            self._slot_mean_key, self._slots_add = key, bool(self.env_mean.any())
        return self._slots_add

    def slot_lists(self, embedded: torch.Tensor) -> torch.Tensor:
        """``Σ_t sel_t G_{t_i t}(R̂⁰[0])``: the embeddings of a full list of empty slots per
        centre type (``embedded`` of `empty_slots`, shape (T², M1)); shape (T, M1)."""
        size = self.config.embedding_size
        counts = self.slot_counts.to(embedded.dtype)
        return (embedded.view(size, size, -1) * counts[None, :, None]).sum(1)

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
            of evaluating them, for the edges and the empty slots alike.
        static : bool
            Group the edges for the exact networks with fixed shapes, no host read.
        half : torch.dtype, optional
            16-bit operands of the exact embedding networks' products (`_batched_mlp`).

        Returns
        -------
        torch.Tensor, shape (N, M1·M2)
        """
        s, env, src, dst = self.environment(pos, graph)
        t_src, t_dst = types.index_select(0, src), types.index_select(0, dst)
        env = self.normalised_environment(env, t_dst)
        g = self.embedding_of(env[:, 0], self.pair_network(t_dst, t_src), table, static, half)
        rows = g[:, :, None] * env[:, None]
        if not self.empty_slots_add():  # (an edge beyond the cutoff has a zero row)
            a = pos.new_zeros(pos.shape[0], g.shape[-1], 4).index_add_(0, dst, rows)
        else:  # a full list of empty slots, less one per edge within the cutoff
            embedded, origin = self.empty_slots(table, static, half)
            size = self.config.embedding_size
            empty = embedded.view(size, size, -1)[:, :, :, None] * origin[:, None, None]
            inside = (s > 0)[:, None, None]
            rows = torch.where(inside, rows - empty.flatten(0, 1).index_select(
                0, t_dst * size + t_src), 0.0)
            lists = self.slot_lists(embedded)[:, :, None] * origin[:, None]
            a = lists.index_select(0, types).index_add_(0, dst, rows)
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
        registers; the backward writes one vector per edge). With ``sel`` the kernel gets
        the statistics and the empty slots' tabulated embeddings (`empty_slots`) as
        `kernels.dp_descriptor.SlotStatistics`.

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
        from kernels.dp_descriptor import DescriptorSpec, SlotStatistics, dp_descriptor

        config = self.config
        src, dst, csr, _ = real_edge_graph(self, pos, graph)
        spec = DescriptorSpec(config.cutoff_smooth, config.cutoff, config.embedding_size,
                              config.type_one_side, config.num_neighbors, table.lower,
                              table.width)
        statistics = None
        if self.empty_slots_add():
            embedded, _ = self.empty_slots(table)
            statistics = SlotStatistics(self.env_mean.float(), self.env_std.float(),
                                        embedded.float(), self.slot_lists(embedded).float())
        elif config.sel is not None:  # the statistics' σ only: empty slots add nothing
            statistics = SlotStatistics(self.env_mean.float(), self.env_std.float())
        return self.contract(dp_descriptor(pos, types, src, dst, csr, table.table, spec,
                                           statistics))

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
            one-time warning, and so are all of the network's own with the ``"deepmd"``
            backend.

        Returns
        -------
        torch.Tensor, shape (N,)
            Of ``self.backend``: the engine's path, or deepmd-kit's model.
        """
        if self.backend == "deepmd":
            ignored = [] if options is None else [
                name for name in options.enabled() if name not in STEP_TECHNIQUES]
            if ignored:
                warnings.warn(f"CGDeepPotential on the deepmd backend runs deepmd-kit's "
                              f"model: {', '.join(ignored)} ignored", RuntimeWarning,
                              stacklevel=2)
            if self._deepmd is None:  # by name: the interoperability module imports this one
                module, name = DEEPMD_EVALUATOR
                self._deepmd = getattr(importlib.import_module(module), name)()
            return self._deepmd.node_energies(self, pos, types, graph)
        table, static, half, fused = None, options is not None and options.cuda_graph, None, False
        if options is not None:
            own = implemented_techniques("dp")
            missing = [name for name in options.enabled()
                       if name not in own and not name.startswith("mlp_")]
            if missing:
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
