"""CGTensorProduct: a NequIP-style E(3)-equivariant tensor-product network as a CG energy model.

Node features are irreducible representations of O(3) (``irreps``, by default
``"16x0e + 16x1o"``: 16 scalars and 16 vectors per bead). Per block ``b`` and edge ``j → i``
(``r_ij = r_i − r_j``, ``d_ij = |r_ij|``)::

    Y_ij = SH(r_ij / d_ij)                     spherical harmonics l ≤ lmax (component norm.)
    w_ij = R_b(e(d_ij)) · C(d_ij)              radial MLP of the basis, one weight per path
    m_i  = Σ_{j ∈ N(i)} TP(L1_b h_j, Y_ij; w_ij) / sqrt(num_neighbors)
    h_i  ← Gate(L2_b m_i) + skip_b(h_i)        e3nn gated nonlinearity, residual
    E    = Σ_i ψ(h_i^{0e})                     output MLP on the even scalars

``TP`` is e3nn's ``o3.TensorProduct`` with NequIP's "uvu" instructions: every channel ``u``
of an input irrep ``l1`` meets each spherical harmonic ``l2`` and gives the output irreps
``l3 ∈ l1 ⊗ l2`` that the gate reads (its scalars, its gates and its gated irreps), one
weight per channel and path from ``w_ij`` (``shared_weights=False``,
``internal_weights=False``). ``L1``, ``L2`` and ``skip`` are ``o3.Linear`` self-interactions
(``skip`` the identity where a block keeps its irreps). The first block reads the type
embedding as scalars. ``e(d)`` is the radial basis of `workbench.model.basis` and ``C`` the
cosine envelope ``½(cos(π d / r_c) + 1)``, zero at and beyond r_c.

Module tree::

    embedding_layer                  Embedding(embedding_size, S)       S = scalars of irreps
    rbf_layer                        GaussianBasis | ExpNormalBasis (+ its cutoff)
    envelope                         CosineCutoff(0, r_c)
    spherical_harmonics              o3.SphericalHarmonics(lmax, normalize=True)
    blocks.{b}.linear_in             o3.Linear(irreps_in, irreps_in)
    blocks.{b}.radial                Linear(K, F), act, Linear(F, F), act, Linear(F, P)
    blocks.{b}.tp                    o3.TensorProduct(irreps_in, sh, irreps_mid, uvu)
    blocks.{b}.linear_out            o3.Linear(irreps_mid, gate.irreps_in)
    blocks.{b}.gate                  e3nn.nn.Gate
    blocks.{b}.skip                  o3.Linear(irreps_in, irreps) (block 0) or identity
    output_network.layers.{0,2,...}  Linear(S0e, w1), act, ..., Linear(wm, 1, bias=False)

* **E(3) invariance of E** and **equivariance of forces**: every layer is equivariant
  (spherical harmonics, Clebsch–Gordan products, irrep-wise linear maps, gates scaled by
  scalars), the energy reads the even scalars only, and positions enter as differences;
  forces are ``F = −∂E/∂r`` by autograd, so ``F(Rr + t) = R F(r)``.
* **Padding and the cutoff**: padding slots get index 0 and a length beyond r_c, so their
  envelope, hence their weights ``w_ij`` and everything they carry, is exactly zero, as for
  edges at or beyond the cutoff; ``C`` and ``C'`` vanish at r_c, so a pair crossing the
  cutoff changes neither energy nor forces.

**Backends of the convolution** (`TP_BACKENDS`, the run-time switch ``network.backend``):
``"e3nn"``, the reference (per-edge tensor product, ``index_add_`` onto the destination);
``"openequivariance"``, OpenEquivariance's fused convolution (``oeq.TensorProductConv``,
deterministic, over the engine's destination-sorted CSR layout); ``"cuequivariance"``,
NVIDIA's ``cuet.ChannelWiseTensorProduct`` with gather and scatter indices. All three read
the same weights (the state dict has no backend in it). The accelerated backends need
their package and a CUDA device; where `backend_problem` finds either missing, the e3nn
path runs with one ``RuntimeWarning`` saying why (``tests/model/test_tensor_product_gpu.py``
runs them on a GPU).

**Techniques of `KernelOptions`** (``Architecture.fused``): ``fused_update`` runs each
block's radial MLP through the engine's packed linear kernel (`kernels.linear`: the
activation applied to each layer's input on load, FP32 as three TF32 tensor-core products
with split weights), with ``mlp_precision`` ``"fp16"`` or ``"bf16"`` as channel-wise scaled
16-bit operands and FP32 accumulation (`kernels.quantize`); the packed weights are cached
until a parameter or the precision changes (`packed_radial`). The envelope, positions,
distances, energies and forces stay FP32. ``tabulated_filter`` reads every block's
radial weights ``R_b(e(d)) · C(d)``, a function of the length alone, from one cubic
Hermite table instead (`workbench.model.tensor_product_tables`: read per edge by
`kernels.table_read` where Triton runs, in PyTorch elsewhere; error at most 1e-6 of each
block's largest weight; ``fused_update`` has nothing left to run beside it and says so).
The e3nn and OpenEquivariance forward and backward passes read nothing on the host; whole
steps (``cuda_graph``) are captured on the OpenEquivariance backend only
(`UNCAPTURED_TP_BACKENDS`). The other techniques have no kernels here: force paths switch
them off and say so.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from workbench.model.architectures import fused_techniques
from workbench.model.basis import (
    CosineCutoff,
    make_basis,
)
from workbench.model.force_paths import STEP_TECHNIQUES
from workbench.model.geometry import edge_vectors
from workbench.model.network_config import ACTIVATIONS, NetworkConfig
from workbench.model.options import KernelOptions
from workbench.model.schnet import MLP
from workbench.model.tensor_product_tables import radial_tables, table_reads, tabulated_weights
from workbench.neighbors import Graph

#: Backends of the convolution, the reference first.
TP_BACKENDS = ("e3nn", "openequivariance", "cuequivariance")

#: The backends whose whole steps are not captured (``cuda_graph`` is switched off with
#: them), and why; OpenEquivariance's are (docs/tensor-product.md, Engine techniques).
UNCAPTURED_TP_BACKENDS = {
    "e3nn": "captured e3nn steps evaluate every slot of the graph's fixed capacity and were "
            "slower than eager ones (1ENH × 64, H200: 654 against 883 timestep·mol/s)",
    "cuequivariance": "its captured steps are not measured; its eager ones are no faster than "
                      "e3nn's",
}

#: Import name and pip name of each accelerated backend's package.
BACKEND_PACKAGES = {
    "openequivariance": ("openequivariance", "openequivariance"),
    "cuequivariance": ("cuequivariance_torch",
                       "cuequivariance-torch cuequivariance-ops-torch-cu12"),
}

_WARNED: set[str] = set()


def _e3nn():
    """``(e3nn, o3, Gate)``, or an ImportError naming the extra to install."""
    try:
        with warnings.catch_warnings():
            # e3nn 0.5 scripts a few helpers with torch.jit.script on import, which current
            # torch deprecates: a notice about e3nn's code that users cannot act on
            warnings.simplefilter("ignore", DeprecationWarning)
            import e3nn
            from e3nn import o3
            from e3nn.nn import Gate
    except ImportError as error:  # pragma: no cover - the extra is part of the test install
        raise ImportError(
            "CGTensorProduct needs e3nn: pip install 'cg-workbench[equivariant]'"
        ) from error
    return e3nn, o3, Gate


@dataclass
class TensorProductConfig(NetworkConfig):
    """Hyper-parameters of :class:`CGTensorProduct`.

    Attributes
    ----------
    embedding_size : int
        Number of bead types (rows of the embedding), at least 1 + largest type.
    irreps : str
        Irreps of the node features (e3nn notation, ``"16x0e + 16x1o"``: 16 scalars and 16
        vectors per bead); they must hold even scalars (``0e``), which the energy head
        reads. One multiplicity for all of them lets cuEquivariance run its CUDA kernel
        (``uniform_1d``; otherwise it runs its PyTorch method and says so).
    lmax : int
        Highest degree of the edges' spherical harmonics.
    blocks : int
        Number of interaction blocks.
    num_rbf : int
        K, radial basis functions on ``[0, cutoff]``.
    radial_width : int
        F, hidden width of each block's radial MLP (two hidden layers).
    cutoff : float
        Graph radius and envelope radius r_c, Å.
    basis : str
        ``"gaussian"`` or ``"exp-normal"``.
    basis_envelope : str
        Envelope inside the basis: ``"cosine"`` or ``"identity"`` (the weights always carry
        the cosine envelope).
    num_neighbors : float
        The messages' sum is divided by its square root (NequIP's average neighbour count).
    output_widths : list of int
        Hidden widths of the per-node energy head.
    activation : str
        One of ``ACTIVATIONS`` (``"silu"`` as in NequIP), for the radial MLP, the even
        scalars of the gates and the energy head (odd scalars take tanh, gates sigmoid).
    """

    label: ClassVar[str] = "NequIP"

    embedding_size: int = 25
    irreps: str = "16x0e + 16x1o"
    lmax: int = 2
    blocks: int = 3
    num_rbf: int = 16
    radial_width: int = 64
    cutoff: float = 10.0
    basis: str = "gaussian"
    basis_envelope: str = "cosine"
    num_neighbors: float = 16.0
    output_widths: list[int] = field(default_factory=lambda: [32])
    activation: str = "silu"


def check_backend(backend: str) -> None:
    """Refuse a name that is not one of `TP_BACKENDS`.

    Raises
    ------
    ValueError
        An unknown backend, with the list of known ones.
    """
    if backend not in TP_BACKENDS:
        raise ValueError(f"unknown tensor-product backend {backend!r}; choose from "
                         f"{', '.join(TP_BACKENDS)}")


def backend_problem(backend: str, device: torch.device | str) -> str | None:
    """Why the convolution backend ``backend`` cannot run on ``device``, or None if it can.

    ``"e3nn"`` runs anywhere. ``"openequivariance"`` and ``"cuequivariance"`` need their
    package and a CUDA device.

    Raises
    ------
    ValueError
        An unknown backend.
    """
    check_backend(backend)
    if backend == "e3nn":
        return None
    module, pip_name = BACKEND_PACKAGES[backend]
    problems = []
    if importlib.util.find_spec(module) is None:
        problems.append(f"{module} is not installed (pip install {pip_name})")
    device = torch.device(device)
    if device.type != "cuda":
        problems.append(f"it needs a CUDA device, the positions are on {device.type}")
    return "; ".join(problems) or None


def warn_backend_fallback_once(backend: str, reason: str) -> None:
    """One ``RuntimeWarning`` per backend and reason that the e3nn path runs instead."""
    _warn_once(f"tensor-product backend {backend!r} unavailable ({reason}); using the e3nn "
               "reference path")


def _warn_once(message: str) -> None:
    """One ``RuntimeWarning`` per message and process."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _activation(irreps, act: nn.Module) -> list:
    """Gate activations of scalar irreps: ``act`` for even ones, tanh for odd ones."""
    return [act if ir.p == 1 else torch.tanh for _, ir in irreps]


def _irrep_key(ir) -> tuple[int, int]:
    """Order of irreps in cuEquivariance: by degree, the natural parity ``(-1)^l`` first."""
    return ir.l, 0 if ir.p == (-1) ** ir.l else 1


class TensorProductBlock(nn.Module):
    """One interaction block: self-interaction, tensor-product convolution, gate, residual.

    Parameters
    ----------
    irreps_in : e3nn.o3.Irreps
        Irreps of the block's input features.
    irreps_sh : e3nn.o3.Irreps
        Irreps of the edge spherical harmonics.
    irreps_out : e3nn.o3.Irreps
        The node-feature irreps of the config (scalars first).
    config : TensorProductConfig
    """

    def __init__(self, irreps_in, irreps_sh, irreps_out, config: TensorProductConfig):
        super().__init__()
        _, o3, Gate = _e3nn()
        act = ACTIVATIONS[config.activation]()
        scalars = o3.Irreps([(m, ir) for m, ir in irreps_out if ir.l == 0])
        gated = o3.Irreps([(m, ir) for m, ir in irreps_out if ir.l > 0])
        self.gate = Gate(scalars, _activation(scalars, act), f"{gated.num_irreps}x0e",
                         [torch.sigmoid], gated)
        targets = {ir for _, ir in self.gate.irreps_in}
        # NequIP's "uvu" instructions, in its loop order (the order of the weights); the
        # middle irreps sorted as cuEquivariance's channel-wise product sorts its outputs
        mid, instructions = [], []
        for i, (mul, ir_in) in enumerate(irreps_in):
            for j, (_, ir_sh) in enumerate(irreps_sh):
                for ir_out in ir_in * ir_sh:
                    if ir_out in targets:
                        instructions.append((i, j, len(mid), "uvu", True))
                        mid.append((mul, ir_out))
        order = sorted(range(len(mid)), key=lambda k: (*_irrep_key(mid[k][1]), k))
        new_index = {old: new for new, old in enumerate(order)}
        self.instructions = [(i, j, new_index[k], mode, train)
                             for i, j, k, mode, train in instructions]
        mid = o3.Irreps([mid[k] for k in order])
        self.irreps_in, self.irreps_sh, self.irreps_mid = irreps_in, irreps_sh, mid
        self.irreps_out = self.gate.irreps_out
        self.linear_in = o3.Linear(irreps_in, irreps_in)
        self.tp = o3.TensorProduct(irreps_in, irreps_sh, mid, self.instructions,
                                   shared_weights=False, internal_weights=False)
        width = config.radial_width
        self.radial_activation = config.activation
        self.radial = nn.Sequential(
            nn.Linear(config.num_rbf, width), ACTIVATIONS[config.activation](),
            nn.Linear(width, width), ACTIVATIONS[config.activation](),
            nn.Linear(width, self.tp.weight_numel),
        )
        self.linear_out = o3.Linear(mid, self.gate.irreps_in)
        self.skip = (nn.Identity() if irreps_in == self.irreps_out
                     else o3.Linear(irreps_in, self.irreps_out))
        self.norm = 1.0 / math.sqrt(config.num_neighbors)
        # accelerated convolutions by (backend, device, dtype): not submodules, so the
        # state dict is the same for every backend
        self._accelerated: dict = {}

    def edge_weights(self, rbf: torch.Tensor, envelope: torch.Tensor,
                     packed: list | None = None) -> torch.Tensor:
        """Per-edge path weights ``R(e(d)) · C(d)``, shape (E, P); zero where C is.

        Parameters
        ----------
        rbf : torch.Tensor, shape (E, K)
        envelope : torch.Tensor, shape (E,)
        packed : list of kernels.PackedLinear, optional
            The radial MLP's three layers packed (`packed_radial`): the MLP runs in the
            packed linear kernel, each hidden activation applied on the next layer's load;
            None runs ``self.radial`` in PyTorch.
        """
        if packed is None:
            return self.radial(rbf) * envelope[:, None]
        from kernels import linear

        activation = self.radial_activation
        hidden = linear(rbf, packed[0])
        hidden = linear(hidden, packed[1], activation)
        return linear(hidden, packed[2], activation) * envelope[:, None]

    def convolution(self, x, sh, weights, src, dst) -> torch.Tensor:
        """Reference convolution ``Σ_j TP(x_j, Y_ij; w_ij)`` onto each destination, (N, mid)."""
        messages = self.tp(x.index_select(0, src), sh, weights)
        return messages.new_zeros(x.shape[0], messages.shape[1]).index_add_(0, dst, messages)

    def forward(self, h, sh, weights, src, dst, backend="e3nn", layout=None):
        """Updated node features, shape (N, irreps.dim).

        Parameters
        ----------
        h : torch.Tensor, shape (N, irreps_in.dim)
        sh : torch.Tensor, shape (E, irreps_sh.dim)
        weights : torch.Tensor, shape (E, P)
            The path weights (`edge_weights`, or read from the tables), zero on padding
            slots and at or beyond the cutoff. With a ``layout``, ``sh`` and ``weights`` are
            in its order (``layout.perm``).
        src, dst : torch.Tensor, shape (E,), int64
            Edge endpoints, safe to gather with (unused with a ``layout``).
        backend : str
            A backend of `TP_BACKENDS` that `backend_problem` found runnable.
        layout : ConvLayout, optional
            The destination-sorted edges (OpenEquivariance).
        """
        x = self.linear_in(h)
        if backend == "openequivariance":
            m = oeq_convolution(self, x, sh, weights, layout)
        elif backend == "cuequivariance":
            m = cue_convolution(self, x, sh, weights, src, dst)
        else:
            m = self.convolution(x, sh, weights, src, dst)
        return self.gate(self.linear_out(m * self.norm)) + self.skip(h)


class CGTensorProduct(nn.Module):
    """NequIP-style tensor-product energy model over a batch of replica graphs (same
    interface as ``CGSchNet``).

    Parameters
    ----------
    config : TensorProductConfig
    backend : str
        Convolution backend (`TP_BACKENDS`); a run-time switch, also settable later as
        ``network.backend``, read at every forward.
    """

    def __init__(self, config: TensorProductConfig | None = None, backend: str = "e3nn"):
        super().__init__()
        e3nn, _, _ = _e3nn()
        defaults = e3nn.get_optimization_defaults()
        # e3nn's generated code as plain torch.fx modules, not TorchScript (deprecated,
        # slower to build, and noisy on current torch); set back afterwards
        e3nn.set_optimization_defaults(jit_script_fx=False)
        try:
            self._build(config or TensorProductConfig())
        finally:
            e3nn.set_optimization_defaults(**defaults)
        self.backend = backend

    def _build(self, config: TensorProductConfig) -> None:
        _, o3, _ = _e3nn()
        self.config = config
        irreps = o3.Irreps(config.irreps).sort().irreps.simplify()
        even_scalars = [(m, ir) for m, ir in irreps if ir.l == 0 and ir.p == 1]
        if not even_scalars:
            raise ValueError(f"NequIP irreps {config.irreps!r} hold no even scalars (0e)")
        if config.lmax < 0 or config.blocks < 1:
            raise ValueError(f"NequIP needs lmax >= 0 and blocks >= 1, got {config.lmax}, "
                             f"{config.blocks}")
        scalars = sum(m for m, ir in irreps if ir.l == 0 and ir.p == 1)
        self.embedding_layer = nn.Embedding(config.embedding_size, scalars)
        self.rbf_layer = make_basis(config.basis, config.basis_envelope, 0.0, config.cutoff,
                                    config.num_rbf)
        self.envelope = CosineCutoff(0.0, config.cutoff)
        irreps_sh = o3.Irreps.spherical_harmonics(config.lmax)
        self.spherical_harmonics = o3.SphericalHarmonics(irreps_sh, normalize=True,
                                                         normalization="component")
        blocks, irreps_in = [], o3.Irreps(f"{scalars}x0e")
        for _ in range(config.blocks):
            blocks.append(TensorProductBlock(irreps_in, irreps_sh, irreps, config))
            irreps_in = blocks[-1].irreps_out
        self.blocks = nn.ModuleList(blocks)
        self.irreps = irreps_in
        self._energy_slice = _even_scalar_slice(irreps_in)
        self.output_network = MLP(
            [self._energy_slice.stop - self._energy_slice.start, *config.output_widths, 1],
            config.activation, last_bias=False,
        )

    @property
    def cutoff(self) -> float:
        """Graph radius r_c in Å."""
        return self.config.cutoff

    @property
    def backend(self) -> str:
        """The convolution backend asked for (`TP_BACKENDS`)."""
        return self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        check_backend(name)
        self._backend = name

    def backend_for(self, device: torch.device) -> str:
        """The backend that runs on ``device``: the one asked for, or e3nn with a one-time
        warning saying why not."""
        problem = backend_problem(self.backend, device)
        if problem is None:
            return self.backend
        warn_backend_fallback_once(self.backend, problem)
        return "e3nn"

    def edge_terms(self, pos: torch.Tensor, graph: Graph):
        """Edge inputs with padding slots made harmless.

        Returns
        -------
        sh : torch.Tensor, shape (E, (lmax + 1)²)
            Spherical harmonics of the edge directions ``r_dst − r_src``.
        d : torch.Tensor, shape (E,)
            Edge lengths, beyond the cutoff on padding slots.
        src, dst : torch.Tensor, shape (E,), int64
            Indices safe to gather with (padding slots point at node 0).
        """
        diff, src, dst = edge_vectors(pos, graph.src, graph.dst, graph.valid, self.cutoff)
        return self.spherical_harmonics(diff), torch.linalg.vector_norm(diff, dim=-1), src, dst

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
            Directed edges (``src`` → ``dst``); edges at or beyond the cutoff and padding
            slots contribute nothing.
        options : KernelOptions, optional
            ``fused_update`` runs the radial MLPs in the packed linear kernel (operands in
            ``mlp_precision``) where `fused_radial_problem` finds nothing;
            ``tabulated_filter`` reads every block's radial weights from its table instead
            (`workbench.model.tensor_product_tables`: `kernels.table_read` where
            `fused_radial_problem` finds nothing and the positions are float32, PyTorch
            elsewhere; fused_update then has nothing to run); ``cuda_graph`` is the
            simulation's. The other techniques (but the MD step's own) have no kernels
            here: ignored with a one-time warning, as is a 16-bit precision without
            ``fused_update`` or where the kernel cannot run. The convolution backend is
            ``self.backend``.

        Returns
        -------
        torch.Tensor, shape (N,)
        """
        tables = radial = None
        if options is not None:
            radial = self._packed_layers(pos, options)
            if options.tabulated_filter:
                tables = radial_tables(self, pos.dtype, pos.device)
        backend = self.backend_for(pos.device)
        sh, d, src, dst = self.edge_terms(pos, graph)
        # per edge, once for all blocks: the table reads, or the basis and the envelope
        if tables is not None:
            kernel = (pos.dtype == torch.float32
                      and fused_radial_problem(self, pos.device, options) is None)
            reads = table_reads(tables, d, kernel)
        else:
            rbf, envelope = self.rbf_layer(d), self.envelope(d)
        layout = None
        if backend == "openequivariance":
            layout = conv_layout(self, pos, graph)
        if layout is not None and layout.perm is not None:
            # in the layout's order once for all blocks: a few columns gathered instead of
            # every block's P weight columns
            sh = sh.index_select(0, layout.perm)
            if tables is not None:
                reads = reads.permuted(layout.perm)
            else:
                rbf, envelope = (t.index_select(0, layout.perm) for t in (rbf, envelope))
        h = self.embedding_layer(types).to(pos.dtype)
        for b, block in enumerate(self.blocks):
            weights = (tabulated_weights(tables, b, reads) if tables is not None else
                       block.edge_weights(rbf, envelope, None if radial is None else radial[b]))
            h = block(h, sh, weights, src, dst, backend, layout)
        return self.output_network(h[:, self._energy_slice]).squeeze(-1)

    def _packed_layers(self, pos: torch.Tensor, options: KernelOptions) -> list | None:
        """Each block's packed radial MLP when ``options`` ask for it and it runs here,
        else None; one warning per reason for what ``options`` ask in vain."""
        from workbench.model.fused_schnet import warn_fallback_once

        own = fused_techniques("nequip")
        missing = [name for name in KernelOptions.techniques() if getattr(options, name)
                   and name not in STEP_TECHNIQUES and name not in own]
        if options.mlp_precision != "fp32" and not options.fused_update:
            missing.append(f"{options.mlp_precision} without fused_update")
        if missing:
            warn_fallback_once(f"CGTensorProduct has no fused kernels for {', '.join(missing)}")
        if options.fused_update and options.tabulated_filter:
            _warn_once("fused_update does nothing beside tabulated_filter: every block's "
                       "radial weights are read from its table (the radial MLPs do not run)")
        if not options.fused_update or options.tabulated_filter:
            return None
        problem = fused_radial_problem(self, pos.device, options)
        if problem is None and pos.dtype != torch.float32:
            problem = f"the packed linear kernel takes float32 positions, not {pos.dtype}"
        if problem is not None:
            warn_fallback_once(problem)
            return None
        return packed_radial(self, options.mlp_precision).layers


def _even_scalar_slice(irreps) -> slice:
    """Columns of the even scalars (0e) of simplified ``irreps``."""
    start = 0
    for (mul, ir), span in zip(irreps, irreps.slices(), strict=True):
        if ir.l == 0 and ir.p == 1:
            return span
        start += mul * ir.dim
    raise ValueError(f"irreps {irreps} hold no even scalars")


# -- the engine's techniques -----------------------------------------------------------------


def fused_radial_problem(model: CGTensorProduct, device: torch.device,
                         options: KernelOptions) -> str | None:
    """Why the radial weights cannot run in their Triton kernels on ``device`` (the MLPs in
    the packed linear kernel with ``fused_update``, else their tables in the table read
    kernel), or None if they can (`workbench.model.force_paths.FUSED_PROBLEMS`)."""
    from kernels.fused_update import ACTIVATIONS as FUSED_ACTIVATIONS
    from workbench.model.fused_schnet import kernel_device_problem

    kernel = "the packed linear kernel" if options.fused_update else "the table read kernel"
    problem = kernel_device_problem(model, device, options, kernel)
    if problem is None and options.fused_update and (
            model.config.activation not in FUSED_ACTIVATIONS):
        problem = (f"the packed linear kernel applies {', '.join(FUSED_ACTIVATIONS)}, not "
                   f"{model.config.activation}")
    return problem


def packed_radial(model: CGTensorProduct, precision: str):
    """Every block's radial MLP as three `kernels.PackedLinear` (operands in ``precision``:
    ``"fp32"``, ``"fp16"`` or ``"bf16"``), cached on ``model`` until a parameter or the
    precision changes (`workbench.model.fused_schnet.cached_packing`).

    Returns
    -------
    workbench.model.fused_schnet.PackedLayers
        ``layers[b]`` the list of block ``b``'s packed layers, input first; no basis spec.
    """
    from kernels import pack_linear
    from workbench.model.fused_schnet import PRECISION_DTYPES, PackedLayers, cached_packing

    def pack(key):
        dtype = PRECISION_DTYPES[precision]
        layers = [[pack_linear(layer.weight, layer.bias, dtype)
                   for layer in block.radial if isinstance(layer, nn.Linear)]
                  for block in model.blocks]
        return PackedLayers(key, None, layers)

    return cached_packing(model, "_packed_radial", precision, pack)


# -- accelerated backends ------------------------------------------------------------------


#: Padding slots per zero pad node in `ConvLayout`. OpenEquivariance's deterministic
#: kernels give each warp an equal share of the sorted edges and add up, one after the
#: other, the partial sums of a row that spans several warps: all padding on one pad row
#: made that row a fifth of the edges (a capture's headroom) and its fixup serial. A row of
#: this many edges spans at most two warps wherever a warp's share (E over a few warps per
#: SM) is longer; the pad nodes cost ``E / 128`` zero rows of node features.
PAD_ROW_EDGES = 128


@dataclass
class ConvLayout:
    """The edges in destination-sorted (CSR) order for OpenEquivariance's deterministic
    convolution; edges that are padding or at or beyond the cutoff point at zero pad nodes
    ``N, N + 1, …``, ``PAD_ROW_EDGES`` edges to each, in both orders.

    Attributes
    ----------
    perm : torch.Tensor or None, shape (E,), int64
        Edge ids in destination order (the engine's ``GraphCSR.dst_perm``); None where the
        graph's own order is that order (a searched graph).
    rows, cols : torch.Tensor, shape (E,), int64
        Destinations (sorted) and sources of the permuted edges.
    sender_perm : torch.Tensor, shape (E,), int64
        Positions in the destination order of the edges in source order (the transpose):
        ``cols[sender_perm]`` is sorted.
    num_nodes : int
        N, the real nodes.
    pad_nodes : int
        Zero rows appended to the node features, ``ceil(E / PAD_ROW_EDGES)``: rows and
        columns index ``N + pad_nodes`` nodes.
    """

    perm: torch.Tensor | None
    rows: torch.Tensor
    cols: torch.Tensor
    sender_perm: torch.Tensor
    num_nodes: int
    pad_nodes: int


def conv_layout(model: CGTensorProduct, pos: torch.Tensor, graph: Graph) -> ConvLayout:
    """The destination-sorted edge layout of ``graph`` from the engine's CSR builders
    (`workbench.model.fused_schnet.real_edge_graph`: a searched graph's own layouts, a
    neighbour list's from a prefix sum, no host synchronisation). Both CSR orders put the
    padding last, so that its slots, the same ones in both, are spread over the pad nodes
    by position."""
    from workbench.model.fused_schnet import real_edge_graph

    src, dst, csr, searched = real_edge_graph(model, pos.detach(), graph)
    n = graph.num_nodes
    slot = torch.arange(src.numel(), device=src.device)
    if searched:  # already in destination order
        perm, rows, cols, position = None, dst, src, slot
    else:
        perm = csr.dst_perm.long()
        rows, cols = dst[perm], src[perm]
        position = torch.empty_like(perm).scatter_(0, perm, slot)
    sender = position[csr.src_perm.long()]
    padding = rows == n
    pad_row = n + torch.div(slot, PAD_ROW_EDGES, rounding_mode="floor")
    return ConvLayout(perm, torch.where(padding, pad_row, rows),
                      torch.where(padding, pad_row, cols), torch.where(padding, slot, sender),
                      n, max(-(-src.numel() // PAD_ROW_EDGES), 1))


def oeq_convolution(block: TensorProductBlock, x, sh, weights, layout: ConvLayout):
    """``block``'s convolution by OpenEquivariance's fused, deterministic
    ``TensorProductConv`` over ``layout``, ``sh`` (E, irreps_sh.dim) and ``weights`` (E, P)
    already in its order; the same weights as e3nn's (a "uvu" problem whose second input
    has multiplicity one keeps e3nn's weight order)."""
    conv = _accelerated(block, "openequivariance", x)
    padded = torch.cat([x, x.new_zeros(layout.pad_nodes, x.shape[1])])
    out = conv.forward(padded, sh, weights, layout.rows, layout.cols, layout.sender_perm)
    return out[: layout.num_nodes]


def cue_convolution(block: TensorProductBlock, x, sh, weights, src, dst, method=None):
    """``block``'s convolution by cuEquivariance's ``ChannelWiseTensorProduct``, gathering
    sources and scattering onto destinations inside the operation; its weights are e3nn's
    in the order of the sorted output irreps (`cue_weight_order`)."""
    tp = _accelerated(block, "cuequivariance", x, method=method)
    weights = weights[:, cue_weight_order(block).to(weights.device)]
    return tp(x, sh, weights, indices_1=src, indices_out=dst, size_out=x.shape[0])


def cue_weight_order(block: TensorProductBlock) -> torch.Tensor:
    """Columns of e3nn's per-edge weights in cuEquivariance's order: e3nn orders them by
    instruction (NequIP's loop), cuEquivariance by the sorted output irreps."""
    offsets, start = [], 0
    for ins in block.tp.instructions:
        size = block.irreps_in[ins.i_in1].mul * block.irreps_sh[ins.i_in2].mul
        offsets.append(range(start, start + size))
        start += size
    by_output = sorted(range(len(offsets)), key=lambda k: block.instructions[k][2])
    return torch.tensor([c for k in by_output for c in offsets[k]], dtype=torch.long)


def _accelerated(block: TensorProductBlock, backend: str, x: torch.Tensor, method=None):
    """The backend's convolution object for ``x``'s device and dtype, built once."""
    key = (backend, x.device, x.dtype, method)
    if key not in block._accelerated:
        if backend == "openequivariance":
            import numpy as np
            import openequivariance as oeq

            dtype = np.float64 if x.dtype == torch.float64 else np.float32
            problem = oeq.TPProblem(block.irreps_in, block.irreps_sh, block.irreps_mid,
                                    block.instructions, shared_weights=False,
                                    internal_weights=False, irrep_dtype=dtype,
                                    weight_dtype=dtype)
            op = oeq.TensorProductConv(problem, deterministic=True)
        else:
            import cuequivariance as cue
            import cuequivariance_torch as cuet

            op = cuet.ChannelWiseTensorProduct(
                cue.Irreps("O3", str(block.irreps_in)), cue.Irreps("O3", str(block.irreps_sh)),
                [cue.O3(ir.l, ir.p) for _, ir in block.irreps_mid], layout=cue.mul_ir,
                shared_weights=False, internal_weights=False, device=x.device, dtype=x.dtype,
                math_dtype=x.dtype, method=method,
            )
            if str(op.irreps_out) != str(cue.Irreps("O3", str(block.irreps_mid))):
                raise RuntimeError(f"cuEquivariance's output irreps {op.irreps_out} are not "
                                   f"e3nn's {block.irreps_mid}")
        block._accelerated[key] = op
    return block._accelerated[key]
