"""Edge vectors of a network's graph: ``x_dst − x_src`` per edge, padding slots pointed at
node 0 and filled beyond the cutoff so that nothing flows through them."""

from __future__ import annotations

import torch

from workbench.model.geometry import edge_vectors


def test_edge_vectors_point_from_source_to_destination_and_pad_beyond_the_cutoff():
    pos = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0], [4.0, 0.0, 0.0]],
                       requires_grad=True)
    src, dst = torch.tensor([0, 2, 7]), torch.tensor([1, 1, 9])  # the last slot is padding
    valid = torch.tensor([True, True, False])
    diff, safe_src, safe_dst = edge_vectors(pos, src, dst, valid, cutoff=3.0)
    assert torch.equal(diff[:2], torch.tensor([[1.0, 2.0, 2.0], [-3.0, 2.0, 2.0]]))
    assert torch.equal(diff[2], torch.full((3,), 7.0))  # 2 r_c + 1 per component
    assert torch.equal(safe_src, torch.tensor([0, 2, 0]))
    assert torch.equal(safe_dst, torch.tensor([1, 1, 0]))
    (grad,) = torch.autograd.grad(diff.sum(), pos)  # the padding slot adds no gradient
    assert torch.equal(grad, torch.tensor([[-1.0] * 3, [2.0] * 3, [-1.0] * 3]))


def test_without_padding_every_slot_is_an_edge():
    pos = torch.randn(4, 3, dtype=torch.float64)
    src, dst = torch.tensor([0, 1, 3]), torch.tensor([2, 3, 0])
    diff, safe_src, safe_dst = edge_vectors(pos, src, dst, None, cutoff=1.0)
    assert torch.equal(diff, pos[dst] - pos[src]) and diff.dtype == torch.float64
    assert safe_src is src and safe_dst is dst
