"""CGSchNet forward pass through the fused Triton kernels, chosen per technique.

:func:`fused_node_energies` computes exactly what :meth:`CGSchNet.forward`
computes, with each technique of :class:`KernelOptions` switched on or off:

* ``fused_radial_basis``: ``kernels.radial_basis`` (distance, basis, envelope in one pass);
* ``fused_message_passing``: ``kernels.cfconv`` (the whole per-edge chain and the
  reduction in one kernel; no E×F or E×K tensor in memory; the filter GEMMs on tensor
  cores, in FP32 as one TF32 product of rounded operands; on the engine's symmetric graphs
  the backward pass evaluates the filter's derivative once per pair);
* ``csr_aggregation``: ``kernels.segment_sum`` over destination segments instead of
  ``scatter_add_``;
* ``fused_update``: every node-level linear layer through ``kernels.linear`` (the
  update's ``lin(tanh(v))`` fused as ``kernels.tanh_linear``; the convolution's ``lin1``
  and ``lin2``; the output MLP): in FP32, three TF32 tensor-core products per tile with
  weights split once when packed (~1e-6 relative), about half the time of cuBLAS FP32;
* ``mlp_precision``: channel-wise FP16/BF16 weights and activations for the filter,
  update and output MLPs (FP32 accumulation; positions, distances, energies and
  forces stay FP32);
* ``pair_filter``: the filter network runs once per unordered pair and both directions
  read its rows: on the edge-tensor paths through `workbench.model.edge_pairs`; with
  ``fused_message_passing`` on the engine's symmetric graphs through
  ``kernels.pair_filter_rows`` (``W`` and ``W'`` of every pair from dense tensor-core tiles)
  and the row-reading convolution ``kernels.tabulated_cfconv``, whose backward needs no
  GEMM; the lengths are computed once and their gradients summed once, as for the tables;
* ``tabulated_filter``: ``kernels.tabulated_cfconv`` reads each block's filter from a
  cubic Hermite table (spacing ``TABLE_SPACING``) built from the loaded weights, with
  exact slopes; forces are the exact derivative of the interpolated filter. The edge
  lengths are computed once (``kernels.edge_distances``) and shared by all blocks, so one
  position-gradient pass serves them all; the blocks' length gradients go into one buffer
  and are summed once (``kernels.LengthGradient``). The engine's graphs are symmetric, so the
  table's backward walks the same destination layout as its forward (contiguous on a
  searched graph).

Edges at or beyond the cutoff (and padding slots) are turned into padding before
the CSR layouts are built, so every kernel sees only real edges while the edge
arrays keep a static shape. The fused ops return gradients for positions and
features only (what forces need); training uses the reference path.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from workbench.model.basis import CosineCutoff, ExpNormalBasis, IdentityCutoff
from workbench.model.edge_pairs import edge_pairs, pair_rows
from workbench.model.options import KernelOptions
from workbench.neighbors import Graph

PRECISION_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

#: Grid spacing of the filter tables, Å (a Gaussian basis of 50 functions on 10 Å has
#: widths of 0.2 Å; the cubic's slope error scales as h³). Measured on an H100 (1ENH x 64,
#: docs/decisions/0004-table-spacing.md): the network's relative RMS force error
#: against the FP32 reference is 4.3e-6 / 5.8e-6 / 2.7e-5 at h = 0.005 / 0.01 / 0.02
#: (shipped CLN025 model: 6.0e-6 / 6.6e-6 / 2.6e-5), and the captured step takes 2,004 /
#: 1,891 / 1,790 us (one run): a coarser table has more of its rows in L1. 0.01 costs
#: little accuracy; 0.02 would be 4x less accurate for 6 % more speed.
TABLE_SPACING = 0.01


def fused_path_problem(schnet, device: torch.device, options: KernelOptions) -> str | None:
    """Why the requested fused techniques cannot run, or None if they can."""
    from kernels import triton_available
    from kernels._triton import INTERPRET

    if not triton_available() or (device.type != "cuda" and not INTERPRET):
        return "Triton kernels need a CUDA GPU (or TRITON_INTERPRET=1 for tests)"
    if schnet.config.activation != "tanh":
        return f"fused kernels implement tanh; this model uses {schnet.config.activation}"
    if schnet.config.filters & (schnet.config.filters - 1) or schnet.config.filters < 16:
        return f"fused kernels need a power-of-two filter count >= 16, got {schnet.config.filters}"
    bf16 = options.mlp_precision == "bf16"
    if bf16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "this GPU does not support bf16"
    for module in (schnet.rbf_layer.cutoff, *(b.conv.cutoff for b in schnet.interaction_blocks)):
        if not isinstance(module, (CosineCutoff, IdentityCutoff)):
            return f"unsupported envelope {type(module).__name__}"
    first = schnet.interaction_blocks[0].conv.cutoff
    for block in schnet.interaction_blocks:
        other = block.conv.cutoff
        if (type(other), other.lower, other.upper) != (type(first), first.lower, first.upper):
            return "interaction blocks with different envelopes"
    return None


def radial_spec(schnet):
    """The kernels' description of this model's basis and envelopes."""
    return radial_spec_of(schnet.rbf_layer, schnet.interaction_blocks[0].conv.cutoff,
                          schnet.cutoff)


def radial_spec_of(basis, conv_cutoff, cutoff: float):
    """The kernels' description (`kernels.RadialSpec`) of a basis module (``GaussianBasis``
    or ``ExpNormalBasis`` of `workbench.model.basis`), the envelope module on the filter
    (``CosineCutoff``, else none) and the graph radius ``cutoff`` (Å); shared by CGSchNet and
    CGPaiNN."""
    from kernels import RadialSpec

    in_basis = isinstance(basis.cutoff, CosineCutoff)
    on_filter = isinstance(conv_cutoff, CosineCutoff)
    lower = (basis.cutoff if in_basis else conv_cutoff).lower
    if isinstance(basis, ExpNormalBasis):
        return RadialSpec.exp_normal_basis(
            basis.means, basis.betas, basis.alpha, cutoff, lower,
            basis.cutoff.lower, in_basis, on_filter,
        )
    return RadialSpec.gaussian(basis.offset, basis.coeff, cutoff, lower, in_basis, on_filter)


@dataclass
class PackedWeights:
    """Weights of one model packed for the kernels at one precision."""

    key: tuple
    spec: object
    filters: list
    updates: list
    outputs: list
    conv_inputs: list
    conv_outputs: list
    tables: list | None = None
    first_inputs: tuple | None = None  # (types, its version, h, xs): `first_block_inputs`


def kernel_device_problem(network, device: torch.device, options: KernelOptions,
                          kernel: str, widths: dict[str, int] | None = None) -> str | None:
    """The reasons shared by CGEGNN's, CGPaiNN's and CGDeepPotential's fused kernels not to
    run (Triton on
    ``device``, float32 weights, bf16 support, ``widths`` by name that are not powers of two
    >= 16), or None; ``kernel`` names the kernel in the message (``"the EGNN edge kernel"``)."""
    from kernels import triton_available
    from kernels._triton import INTERPRET

    if not triton_available() or (device.type != "cuda" and not INTERPRET):
        return "Triton kernels need a CUDA GPU (or TRITON_INTERPRET=1 for tests)"
    if next(network.parameters()).dtype != torch.float32:
        return f"{kernel} takes float32 weights"
    bf16 = options.mlp_precision == "bf16"
    if bf16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "this GPU does not support bf16"
    for name, width in (widths or {}).items():
        if width & (width - 1) or width < 16:
            return f"{kernel} needs a power-of-two {name} >= 16, got {width}"
    return None


@dataclass
class PackedLayers:
    """A fused kernel's description of one CGEGNN, CGPaiNN or CGTensorProduct at one
    precision.

    Attributes
    ----------
    key : tuple
        Precision and `weights_key` of the network when packed (`cached_packing`'s
        validity).
    spec : kernels.RadialSpec or None
        Basis and envelopes (None where the kernels compute no basis: CGTensorProduct's).
    layers : list
        Each layer's packed weights (`kernels.EdgeMLPParams` of a CGEGNN layer's edge MLP,
        `kernels.PaiNNFilterParams` of a CGPaiNN block's filter network, the three
        `kernels.PackedLinear` of a CGTensorProduct block's radial MLP).
    """

    key: tuple
    spec: object
    layers: list


def cached_packing(network: torch.nn.Module, attribute: str, precision, pack):
    """``pack(key)`` (run under ``torch.no_grad()``; returns an object with that ``key``),
    kept on ``network`` as ``attribute`` until a parameter, a buffer or ``precision`` (a
    precision name, or anything hashable the packing depends on besides the weights, e.g.
    a dtype and a device) changes (`weights_key`)."""
    key = (precision, weights_key(network))
    cached = getattr(network, attribute, None)
    if cached is not None and cached.key == key:
        return cached
    with torch.no_grad():
        packed = pack(key)
    setattr(network, attribute, packed)
    return packed


def weights_key(module: torch.nn.Module) -> tuple:
    """Identity and version of every parameter and buffer: changes when any is replaced
    or modified in place."""
    tensors = (*module.parameters(), *module.buffers())
    return tuple((t.data_ptr(), t._version) for t in tensors)


def packed_weights(schnet, precision: str) -> PackedWeights:
    """Packed weights, cached on the module until a parameter changes."""
    from kernels import pack_filter, pack_linear

    key = (precision, weights_key(schnet))
    cached = getattr(schnet, "_packed_weights", None)
    if cached is not None and cached.key == key:
        return cached
    dtype = PRECISION_DTYPES[precision]
    spec = radial_spec(schnet)
    with torch.no_grad():
        filters, updates, conv_inputs, conv_outputs = [], [], [], []
        for block in schnet.interaction_blocks:
            # lin1 and lin2 stay FP32 (mlp_precision names the filter, update and output MLPs)
            conv_inputs.append(pack_linear(block.conv.lin1.weight, block.conv.lin1.bias))
            conv_outputs.append(pack_linear(block.conv.lin2.weight, block.conv.lin2.bias))
            layers = block.conv.filter_network.layers
            filters.append(
                pack_filter(
                    layers[0].weight, layers[0].bias, layers[2].weight, layers[2].bias,
                    dtype=dtype, spec=spec,
                )
            )
            updates.append(pack_linear(block.lin.weight, block.lin.bias, dtype=dtype))
        outputs = [
            pack_linear(layer.weight, layer.bias, dtype=dtype)
            for layer in schnet.output_network.layers
            if isinstance(layer, torch.nn.Linear)
        ]
    packed = PackedWeights(key, spec, filters, updates, outputs, conv_inputs, conv_outputs)
    schnet._packed_weights = packed
    return packed


def filter_tables(schnet, packed: PackedWeights, device: torch.device) -> list:
    """One filter table per block (built once per set of weights, kept with ``packed``)."""
    if packed.tables is None:
        packed.tables = build_filter_tables(schnet, device)
    return packed.tables


def first_block_inputs(schnet, types: torch.Tensor, packed: PackedWeights
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The embedding ``h`` of ``types`` and the first block's ``xs = lin1(h)``, both
    ``(N, F)`` float32.

    They depend on the weights and the bead types only, not on the positions, so the
    node-kernel paths (whose packed layers give gradients for positions only) compute them
    once, without gradient, and keep them with ``packed`` (replaced when a weight changes)
    while ``types`` is the same tensor, unmodified (`Potential` passes the same one at
    every step). A step then starts at the first convolution, and that convolution's
    backward computes no gradient for ``xs``.
    """
    cached = packed.first_inputs
    if cached is None or cached[0] is not types or cached[1] != types._version:
        with torch.no_grad():
            h = schnet.embedding_layer(types)
            xs = _mlp_linear(h, packed.conv_inputs[0], False)
        packed.first_inputs = cached = (types, types._version, h, xs)
    return cached[2], cached[3]


def build_filter_tables(network, device: torch.device, block_filters=None) -> list:
    """Cubic Hermite tables of every block's filter, ``W_b(d) = MLP_b(basis(d)) C_b(d)`` of
    a CGSchNet (or ``block_filters``'), on a grid of spacing ``TABLE_SPACING`` up to the
    network's cutoff.

    Parameters
    ----------
    network : nn.Module
        A CGSchNet, or any network with a ``cutoff`` (Å) that ``block_filters`` reads.
    device : torch.device
        Where the tables are built and kept.
    block_filters : callable, optional
        ``block_filters(model) -> list of fn``: per block, ``fn(d)`` maps float64 lengths
        ``[G]`` to the block's filter ``[G, F]`` (differentiable, pointwise in ``d``), read
        from ``model``, a float64 copy of ``network``. Default: `schnet_block_filters`.

    Returns
    -------
    list of kernels.FilterTable
        One per block. Evaluated in float64 on the copy; slopes are exact (forward-mode AD),
        so the derivatives of the basis and of the envelope are in the tables.
    """
    import copy

    from kernels.tabulated import tabulate_filter

    model = copy.deepcopy(network).double()
    points = int(round(network.cutoff / TABLE_SPACING)) + 1
    with torch.no_grad():
        return [tabulate_filter(fn, points, network.cutoff, device=device)
                for fn in (block_filters or schnet_block_filters)(model)]


def schnet_block_filters(schnet) -> list:
    """Each interaction block's filter ``d -> MLP_b(basis(d)) C_b(d)`` ([G] -> [G, F]) of a
    CGSchNet, zero at and beyond the cutoff (`build_filter_tables`)."""

    def block_filter(block):
        def filter_fn(d):
            envelope = torch.where(d < schnet.cutoff, block.conv.cutoff(d), torch.zeros_like(d))
            return block.conv.filter_network(schnet.rbf_layer(d)) * envelope[:, None]
        return filter_fn

    return [block_filter(block) for block in schnet.interaction_blocks]


def real_edge_graph(schnet, pos: torch.Tensor, graph: Graph):
    """Edge arrays in which edges at or beyond the cutoff and padding slots point at node N.

    Returns ``(src, dst, csr, searched)`` with int64 ``[E]`` arrays, both CSR layouts and
    whether the graph is a searched one; no host synchronisation. A neighbour list's graph
    (``graph.sorted_pairs``) gets its layouts from a prefix sum and binary searches instead
    of atomic counting and ranking; a searched graph (``graph.csr`` at this model's cutoff)
    is used as it is, and its destination layout's permutation is the identity.
    """
    from kernels import build_csr, build_csr_sorted_pairs

    if graph.csr is not None and graph.cutoff == schnet.cutoff:
        return graph.src, graph.dst, graph.csr, True
    n = graph.num_nodes
    src, dst = graph.src, graph.dst
    valid = (src < n) & (dst < n)
    if graph.valid is not None:
        valid &= graph.valid
    s = torch.where(valid, src, 0)
    t = torch.where(valid, dst, 0)
    d2 = ((pos[t] - pos[s]) ** 2).sum(-1)
    real = valid & (d2 < schnet.cutoff**2)
    pad = torch.full_like(src, n)
    src, dst = torch.where(real, src, pad), torch.where(real, dst, pad)
    build = build_csr_sorted_pairs if graph.sorted_pairs else build_csr
    return src, dst, build(src, dst, n), False


def _mlp_linear(x, packed, tanh_input: bool):
    from kernels import linear

    return linear(x, packed, "tanh" if tanh_input else None)


def _output_energies(schnet, h, packed: PackedWeights | None):
    if packed is None:
        return schnet.output_network(h).squeeze(-1)
    x = h
    for i, layer in enumerate(packed.outputs):
        x = _mlp_linear(x, layer, tanh_input=i > 0)
    return x.squeeze(-1)


def fused_node_energies(
    schnet, pos: torch.Tensor, types: torch.Tensor, graph: Graph, options: KernelOptions
) -> torch.Tensor:
    """Per-node energies ``(N,)`` through the kernels that ``options`` switch on."""
    from kernels import (
        LengthGradient,
        cfconv,
        edge_distances,
        pair_filter_rows,
        pair_layout,
        radial_basis,
        rows_fit,
        segment_sum,
        tabulated_cfconv,
        tanh_linear,
    )

    precision = options.mlp_precision
    packed = packed_weights(schnet, precision)
    sixteen = precision != "fp32"
    node_kernels = options.fused_update or sixteen
    n = graph.num_nodes
    # the CSR layouts serve the kernels that walk them; node layers alone (fused_update,
    # 16-bit MLPs) keep the reference path's edge arrays and build none
    if (options.fused_radial_basis or options.fused_message_passing or options.csr_aggregation
            or options.tabulated_filter or options.pair_filter):
        src, dst, csr, searched = real_edge_graph(schnet, pos, graph)
        valid = dst < n
    else:
        src, dst, valid = graph.src, graph.dst, graph.valid
    tables = filter_tables(schnet, packed, pos.device) if options.tabulated_filter else None
    # exact filters once per pair (symmetric graphs), read by the convolution kernels
    per_pair = (tables is None and options.fused_message_passing and options.pair_filter
                and graph.sorted_pairs
                and rows_fit(src.numel(), schnet.config.filters, PRECISION_DTYPES[precision]))
    if tables is not None or per_pair:  # lengths once for all blocks (one position-
        dist = edge_distances(pos, src, dst, csr)  # gradient pass), their gradients summed
        length_grad = LengthGradient(len(schnet.interaction_blocks))  # once
    if per_pair:
        layout = pair_layout(csr, src.numel())
    materialised = tables is None and not options.fused_message_passing
    rbf = env = None
    if materialised:  # only the edge-tensor paths gather with safe indices
        if options.fused_radial_basis:
            safe_src, safe_dst = torch.where(valid, src, 0), torch.where(valid, dst, 0)
            _, rbf, env = radial_basis(pos, src, dst, csr, packed.spec)
        else:
            d, safe_src, safe_dst = schnet.edge_distances(pos, src, dst, valid)
            rbf = schnet.rbf_layer(d)
            env = schnet.envelope(schnet.interaction_blocks[0], d)
        if options.pair_filter:  # the filter rows of one direction per pair
            pairs = edge_pairs(src, dst, n)
            rbf = rbf.index_select(0, pairs.forward)  # padding edges read the unused slot,
            env = torch.where(pairs.used, env.index_select(0, pairs.forward), 0.0)  # zero

    if node_kernels:
        h, first_xs = first_block_inputs(schnet, types, packed)
    else:
        h, first_xs = schnet.embedding_layer(types), None
    for b, block in enumerate(schnet.interaction_blocks):
        conv = block.conv
        if b == 0 and first_xs is not None:
            xs = first_xs
        else:
            xs = _mlp_linear(h, packed.conv_inputs[b], False) if node_kernels else conv.lin1(h)
        if tables is not None or per_pair:
            filt = (tables[b] if tables is not None
                    else pair_filter_rows(dist, layout, packed.filters[b], packed.spec))
            u = tabulated_cfconv(dist, xs, src, dst, csr, filt, symmetric=graph.sorted_pairs,
                                 slots_are_edges=searched, length_grad=length_grad)
        elif options.fused_message_passing:
            u = cfconv(pos, xs, src, dst, csr, packed.filters[b], packed.spec,
                       symmetric=graph.sorted_pairs)
        else:
            if sixteen:
                filt = packed.filters[b]
                hidden = _mlp_linear(rbf, filt.lin1, tanh_input=False)
                w = _mlp_linear(hidden, filt.lin2, tanh_input=True)
            else:
                w = conv.filter_network(rbf)
            w = w * env[:, None]
            if options.pair_filter:
                w = pair_rows(w, pairs)
            # gather / scatter_add_ over broadcast index views, as the reference path does
            # (index_select / index_add_ take 3x longer at E x 128 and made the techniques
            # that keep edge tensors slower than the baseline). Padding slots and edges at
            # or beyond the cutoff have a zero envelope, so their messages are exactly zero.
            messages = xs.gather(0, safe_src[:, None].expand_as(w)) * w
            if options.csr_aggregation:
                u = segment_sum(messages, csr.dst_ptr, csr.dst_perm)
            else:
                u = torch.zeros_like(xs).scatter_add_(0, safe_dst[:, None].expand_as(messages),
                                                      messages)
        if node_kernels:
            v = _mlp_linear(u, packed.conv_outputs[b], False)
            h = tanh_linear(v, packed.updates[b], residual=h)
        else:
            h = h + block.lin(block.activation(conv.lin2(u)))
    return _output_energies(schnet, h, packed if node_kernels else None)


_WARNED: set[str] = set()


def warn_fallback_once(reason: str) -> None:
    """Tell the user once per reason that the reference path is used instead."""
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(
            f"fused kernels unavailable ({reason}); using the PyTorch reference path",
            RuntimeWarning,
            stacklevel=3,
        )
