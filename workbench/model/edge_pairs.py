"""One filter per unordered pair: the two directions of a pair share ``W(d)``.

A SchNet filter depends on the edge length only, and the engine's graphs are symmetric:
``j → i`` is an edge exactly when ``i → j`` is, with bit-identical lengths (the squared
differences of the two directions are the same numbers). So the filter network needs to run
on one direction of every pair, half the rows, and each directed edge reads its pair's row.

`edge_pairs` finds the pairs with static shapes (no host synchronisation; safe inside a
captured CUDA graph): the representative of a pair is its direction with ``src < dst``, and
the pairs are numbered in edge order. `pair_rows` spreads the pairs' rows back to the
edges; its backward adds the two directions' gradients with gathers (deterministic, no
scatter).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["EdgePairs", "edge_pairs", "pair_rows"]


@dataclass(frozen=True)
class EdgePairs:
    """Pairs of a symmetric edge list.

    Attributes
    ----------
    forward, backward : Tensor, int64 [P]
        Per pair slot: the edge ``src < dst`` and its reverse. ``P = E // 2 + 1`` (at most
        ``E // 2`` pairs among ``E`` edge slots); unused slots, the last one always among
        them, hold some edge id and are never read back.
    slot : Tensor, int64 [E]
        Per edge: the slot of its pair; ``P - 1`` (unused) for padding edges.
    used : Tensor, bool [P]
        Slots that hold a pair.
    """

    forward: torch.Tensor
    backward: torch.Tensor
    slot: torch.Tensor
    used: torch.Tensor


def edge_pairs(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> EdgePairs:
    """Pair up the directions of a symmetric edge list.

    Parameters
    ----------
    src, dst : Tensor, int64 [E]
        Edges ``src → dst``; an endpoint ``>= num_nodes`` marks padding. The valid edges
        must be symmetric (every graph the engine builds is), without duplicates.
    num_nodes : int
        N.

    Returns
    -------
    EdgePairs
    """
    n, num_edges = num_nodes, src.numel()
    if num_edges == 0:
        none = torch.zeros(1, dtype=torch.long, device=src.device)
        return EdgePairs(none, none, src, none.bool())
    ids = torch.arange(num_edges, device=src.device)
    valid = (src < n) & (dst < n)
    never = (n + 1) ** 2  # above every valid key
    key = torch.where(valid, dst * (n + 1) + src, never)
    order = torch.argsort(key)
    reverse_key = torch.where(valid, src * (n + 1) + dst, never)
    found = torch.searchsorted(key[order], reverse_key).clamp(max=num_edges - 1)
    reverse = torch.where(valid, order[found], ids)
    upper = valid & (src < dst)
    rank = torch.cumsum(upper, 0) - 1
    num_slots = num_edges // 2 + 1
    unused = num_slots - 1
    own = torch.where(upper, rank, unused)
    slot = torch.where(upper, rank, torch.where(valid, own[reverse], unused))
    forward = torch.zeros(num_slots, dtype=torch.long, device=src.device)
    forward.index_put_((own,), ids)  # duplicates only at the unused slot
    used = torch.zeros(num_slots, dtype=torch.bool, device=src.device)
    used.index_put_((own,), upper)  # the unused slot gets False only
    return EdgePairs(forward, reverse[forward], slot, used)


class _PairRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows, pairs):
        ctx.pairs = pairs
        return rows.index_select(0, pairs.slot)

    @staticmethod
    def backward(ctx, grad):
        pairs = ctx.pairs
        if grad.shape[0] == 0:
            return grad.new_zeros(pairs.used.numel(), *grad.shape[1:]), None
        both = grad.index_select(0, pairs.forward) + grad.index_select(0, pairs.backward)
        return torch.where(pairs.used[:, None], both, 0.0), None


def pair_rows(rows: torch.Tensor, pairs: EdgePairs) -> torch.Tensor:
    """Each edge's row of its pair: ``out[e] = rows[pairs.slot[e]]``.

    Parameters
    ----------
    rows : Tensor, float [P, F]
        One row per pair slot (e.g. the filter evaluated at ``forward``'s lengths).
    pairs : EdgePairs

    Returns
    -------
    Tensor, [E, F]
        Padding edges get the unused slot's row (callers mask them). The gradient of a
        pair's row is the sum of its two edges' gradients, 0 for unused slots.
    """
    return _PairRows.apply(rows, pairs)
