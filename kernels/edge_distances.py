"""Edge lengths as one autograd op, shared by every interaction block of a step.

``d_e = |r_dst - r_src|`` for the edges of both CSR layouts. A model whose blocks read the
same edges (the tabulated filters: ``W_b(d)`` depends on the distance only) computes the
lengths once per step; each block's backward returns ``dE_b/dd_e``, autograd adds the
blocks' vectors (``[E]`` floats each) and a single `edge_grad_to_positions` turns the sum into
position gradients. Without it every block would recompute distances in its forward and
backward kernels and run its own position-gradient kernel.

Forward: one program per destination node walks its CSR segment in tiles of ``BLOCK_E``
edges and writes ``d_e`` with the arithmetic of `kernels.radial_basis.edge_vector` (IEEE
square root), so the lengths are the same bits as those the pair search compared with the
cutoff. Entries of padding edges (in no segment) are 0 and receive no gradient.
"""

from __future__ import annotations

import torch

from kernels._triton import tl, triton
from kernels.csr import GraphCSR, valid_edge_mask
from kernels.radial_basis import edge_vector, reference_distances
from kernels.segment_reduce import edge_grad_to_positions

__all__ = ["edge_distances", "edge_distances_reference"]


@triton.jit
def _distance_kernel(pos_ptr, src_ptr, ptr_ptr, perm_ptr, out_ptr, BLOCK_E: tl.constexpr):
    """``out[e] = |pos[i] - pos[src_e]|`` for the edges ``e`` of node ``i``'s segment.

    pos_ptr: float32 [P, 3]; src_ptr: int64 [E]; ptr_ptr, perm_ptr: int32 destination CSR
    (``dst_ptr [N+1]``, ``dst_perm [E]``); out_ptr: float32 [E] (segment edges written).
    """
    node = tl.program_id(0).to(tl.int64)
    end = tl.load(ptr_ptr + node + 1)
    for p0 in range(tl.load(ptr_ptr + node), end, BLOCK_E):
        p = p0 + tl.arange(0, BLOCK_E)
        pmask = p < end
        e = tl.load(perm_ptr + p, mask=pmask, other=0).to(tl.int64)
        j = tl.load(src_ptr + e, mask=pmask, other=0)
        _, _, _, d = edge_vector(pos_ptr, j * 0 + node, j, pmask)
        tl.store(out_ptr + e, d, mask=pmask)


class _EdgeDistances(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pos, src, dst, csr):
        if pos.dtype != torch.float32 or pos.ndim != 2 or pos.shape[1] != 3:
            raise ValueError(f"edge_distances needs float32 positions [P, 3]; got "
                             f"{pos.dtype} {tuple(pos.shape)}")
        pos = pos.contiguous()
        out = torch.zeros(src.numel(), dtype=torch.float32, device=pos.device)
        if csr.num_nodes:
            _distance_kernel[(csr.num_nodes,)](pos, src, csr.dst_ptr, csr.dst_perm, out,
                                               BLOCK_E=64, num_warps=2)
        ctx.save_for_backward(pos, src, dst, *csr)
        return out

    @staticmethod
    def backward(ctx, grad_d):
        pos, src, dst, *csr = ctx.saved_tensors
        grad_pos = edge_grad_to_positions(grad_d.float(), pos, src, dst, GraphCSR(*csr))
        return grad_pos, None, None, None


def edge_distances(pos, src, dst, csr: GraphCSR):
    """Lengths of the graph's edges, differentiable in the positions.

    Parameters
    ----------
    pos : Tensor, float32 [P, 3]
        Flattened positions, ``P >= csr.num_nodes`` (rows beyond are padding: never read,
        zero gradient). May require grad.
    src, dst : Tensor, int64 [E]
        Edge endpoints.
    csr : GraphCSR
        Both CSR layouts of these edges (`kernels.csr.build_csr`).

    Returns
    -------
    Tensor, float32 [E]
        ``|r_dst - r_src|`` for the edges in a segment, 0 for padding edges. Its backward is
        `kernels.segment_reduce.edge_grad_to_positions` (deterministic, no atomics).
    """
    return _EdgeDistances.apply(pos, src, dst, csr)


def edge_distances_reference(pos, src, dst, csr: GraphCSR):
    """PyTorch reference of `edge_distances` (autograd; any float dtype), same signature."""
    valid = valid_edge_mask(csr)
    return torch.where(valid, reference_distances(pos, src, dst, valid), 0.0)
