"""Fused Deep Potential descriptor (kernels.dp_descriptor): the kernel's ``A`` and position
gradients against the PyTorch reference and float64 finite differences, with and without
deepmd-kit's statistics and empty slots, padding and edges beyond the cutoff, one-side
networks, argument checks."""

import pytest
import torch
from kernels_testlib import central_differences, make_graph, rel_err, within_cutoff

from kernels.dp_descriptor import (
    DescriptorSpec,
    SlotStatistics,
    dp_descriptor,
    dp_descriptor_reference,
)
from kernels.tabulated import tabulate_filter

TYPES, M1, CUTOFF = 2, 16, 5.0


def embedding_table(networks, seed=0):
    """All ``networks`` embeddings ``tanh(a x + b) + c x`` side by side (``M1`` columns each)
    on ``x`` in [0, 2], as `workbench.model.dp_tables` builds them."""
    g = torch.Generator().manual_seed(seed)
    a, b, c = (torch.randn(networks * M1, generator=g, dtype=torch.float64) for _ in range(3))
    return tabulate_filter(lambda x: torch.tanh(a * x[:, None] + b) + c * x[:, None], 65, 2.0)


def slot_statistics(seed=0):
    """Per-type statistics (every column's mean and deviation its own) and random empty
    slots' embeddings; the table's ``x`` starts at -0.5, below every ``-mu_0 / sigma_0``."""
    g = torch.Generator().manual_seed(seed)
    mean = 0.1 * torch.rand(TYPES, 4, generator=g)
    std = 0.5 + torch.rand(TYPES, 4, generator=g)
    empty = torch.randn(TYPES * TYPES, M1, generator=g)
    return SlotStatistics(mean, std, empty, 3.0 * empty.view(TYPES, TYPES, M1).sum(1))


def setup(one_side=False, seed=0, statistics=False):
    g = make_graph(num_nodes=20, box=8.0, cutoff=6.0, drop=0, seed=seed)  # and beyond CUTOFF
    n = g["num_nodes"]
    types = torch.randint(0, TYPES, (n + 1,), generator=torch.Generator().manual_seed(seed))
    table = embedding_table(TYPES if one_side else TYPES * TYPES, seed)
    spec = DescriptorSpec(cutoff_smooth=3.0, cutoff=CUTOFF, num_types=TYPES,
                          type_one_side=one_side, num_neighbors=6.0,
                          lower=-0.5 if statistics else 0.0, width=M1)
    weight = torch.randn(n, M1, 4, generator=torch.Generator().manual_seed(seed + 1))
    return g, types, table, spec, weight, slot_statistics(seed) if statistics else None


def run(op, g, pos, types, table, spec, weight, statistics=None):
    """``A`` and the gradient of ``<A, weight>`` w.r.t. the positions."""
    pos = pos.clone().requires_grad_()
    a = op(pos, types, g["src"], g["dst"], g["csr"], table, spec, statistics)
    (grad,) = torch.autograd.grad((a * weight.to(a.dtype)).sum(), pos)
    return a.detach(), grad


@pytest.mark.parametrize("statistics", [False, True], ids=["plain", "statistics"])
@pytest.mark.parametrize("one_side", [False, True], ids=["pairs", "one-side"])
def test_kernel_matches_the_reference_and_finite_differences(one_side, statistics):
    g, types, table, spec, weight, stats = setup(one_side, statistics=statistics)
    a, grad = run(dp_descriptor, g, g["pos"], types, table, spec, weight, stats)
    a_ref, grad_ref = run(dp_descriptor_reference, g, g["pos"].double(), types, table, spec,
                          weight, stats)
    assert float(a_ref.abs().max()) > 1e-2 and float(grad_ref.abs().max()) > 1e-2
    assert rel_err(a, a_ref) < 1e-5 and rel_err(grad, grad_ref) < 1e-5

    def energy(p):
        with torch.no_grad():
            a = dp_descriptor_reference(p, types, g["src"], g["dst"], g["csr"], table, spec,
                                        stats)
            return (a * weight.double()).sum()

    fd = central_differences(energy, g["pos"].double(), h=1e-6)
    assert rel_err(grad_ref, fd) < 1e-7  # the reference is -dE/dr of the table's model
    assert rel_err(grad, fd) < 1e-5


def test_statistics_of_zero_mean_need_no_empty_slots():
    """With ``mu = 0`` an empty slot holds the zero row: the statistics without their empty
    slots (``empty`` None, the kernels skip that work) give what the full ones give."""
    g, types, table, spec, weight, stats = setup(seed=5, statistics=True)
    stats = stats._replace(mean=torch.zeros_like(stats.mean))
    without = SlotStatistics(stats.mean, stats.std)
    a, grad = run(dp_descriptor, g, g["pos"], types, table, spec, weight, stats)
    a_skip, grad_skip = run(dp_descriptor, g, g["pos"], types, table, spec, weight, without)
    a_ref, grad_ref = run(dp_descriptor_reference, g, g["pos"].double(), types, table, spec,
                          weight, without)
    torch.testing.assert_close(a_skip, a, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad_skip, grad, rtol=1e-5, atol=1e-6)
    assert rel_err(a_skip, a_ref) < 1e-5 and rel_err(grad_skip, grad_ref) < 1e-5
    # σ still counts: the statistics are not the identity
    a_plain, _ = run(dp_descriptor, g, g["pos"], types, table, spec, weight, None)
    assert rel_err(a_plain, a_skip) > 1e-2


@pytest.mark.parametrize("statistics", [False, True], ids=["plain", "statistics"])
def test_padding_and_edges_beyond_the_cutoff_add_nothing(statistics):
    g, types, table, spec, weight, stats = setup(seed=3, statistics=statistics)
    near, _ = within_cutoff(g, g["pos"], CUTOFF)
    a, grad = run(dp_descriptor, g, g["pos"], types, table, spec, weight, stats)
    a_near, grad_near = run(dp_descriptor, near, g["pos"], types, table, spec, weight, stats)
    torch.testing.assert_close(a, a_near, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, grad_near, rtol=1e-5, atol=1e-6)
    assert torch.all(grad[g["num_nodes"]] == 0)  # the padding node's row


def test_arguments_are_checked():
    g, types, table, spec, _, stats = setup(statistics=True)
    args = (g["src"], g["dst"], g["csr"], table)
    with pytest.raises(ValueError, match="float32 positions"):
        dp_descriptor(g["pos"].double(), types, *args, spec)
    with pytest.raises(ValueError, match="power of two"):
        dp_descriptor(g["pos"], types, *args, spec._replace(width=24))
    with pytest.raises(ValueError, match=r"SlotStatistics.empty contiguous float32 \(4, 16\)"):
        dp_descriptor(g["pos"], types, *args, spec, stats._replace(empty=stats.lists))
