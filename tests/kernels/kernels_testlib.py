"""Shared builders for the kernel tests: small random graphs, bases and weights."""

from __future__ import annotations

import torch

from kernels import RadialSpec, build_csr_reference

__all__ = ["make_graph", "radial_specs", "filter_weights", "rel_err", "within_cutoff"]


def make_graph(num_nodes=24, box=9.0, cutoff=6.0, pad=20, drop=3, device="cpu", seed=0,
               shuffle=False):
    """Random positions, the cutoff graph sorted by dst, and padding edges.

    Returns a dict with ``pos [N+1, 3]`` (row N is a padding node), ``src``, ``dst`` (int64,
    real edges first, then ``pad`` edges ``N -> N``), ``num_edges`` (a 1-element tensor that
    also drops the last ``drop`` real edges), ``csr`` (reference CSR) and ``num_nodes``.
    """
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(num_nodes + 1, 3, generator=g, dtype=torch.float64) * box
    ii, jj = torch.meshgrid(torch.arange(num_nodes), torch.arange(num_nodes), indexing="ij")
    dist = (pos[ii] - pos[jj]).norm(dim=-1)
    keep = (ii != jj) & (dist < cutoff)
    dst, src = ii[keep], jj[keep]
    real = dst.numel()
    if shuffle:
        order = torch.randperm(real, generator=g)
        dst, src = dst[order], src[order]
    dst = torch.cat([dst, torch.full((pad,), num_nodes)])
    src = torch.cat([src, torch.full((pad,), num_nodes)])
    num_edges = torch.tensor([real - drop])
    out = dict(pos=pos.float(), src=src, dst=dst, num_edges=num_edges, num_nodes=num_nodes)
    out = {k: v.to(device) if torch.is_tensor(v) else v for k, v in out.items()}
    out["csr"] = build_csr_reference(out["src"], out["dst"], num_nodes, out["num_edges"])
    return out


def within_cutoff(g, pos, cutoff):
    """The graph of ``g``'s real edges shorter than ``cutoff`` (positions ``pos``), and the
    nodes all of whose edges in ``g`` are at or beyond it.

    Returns ``(near, lonely)``: a dict like `make_graph`'s with ``src``, ``dst`` and ``csr``
    of those edges, and a bool ``[num_nodes]``. Asserts that more than 20 real edges are cut.
    """
    n = g["num_nodes"]
    d = (pos[g["dst"]] - pos[g["src"]]).norm(dim=1)
    inside = (g["dst"] < n) & (d < cutoff)
    assert int((~inside & (g["dst"] < n)).sum()) > 20, "needs edges beyond the cutoff"
    near = dict(g, src=g["src"][inside], dst=g["dst"][inside])
    near["csr"] = build_csr_reference(near["src"], near["dst"], n)
    ptr, near_ptr = g["csr"].dst_ptr, near["csr"].dst_ptr
    return near, (ptr[1:] > ptr[:-1]) & (near_ptr[1:] == near_ptr[:-1])


def radial_specs(K=8, cutoff=6.0, device="cpu"):
    """The four basis / envelope variants of mlcg, keyed by a short name."""
    mu = torch.linspace(0.0, cutoff, K, device=device)
    coeff = -0.5 / float(mu[1] - mu[0]) ** 2
    means = torch.linspace(float(torch.exp(torch.tensor(-cutoff))), 1.0, K, device=device)
    betas = torch.full((K,), (2.0 / K * (1.0 - float(torch.exp(torch.tensor(-cutoff))))) ** -2,
                       device=device)
    return {
        "gauss": RadialSpec.gaussian(mu, coeff, cutoff),
        "gauss_env": RadialSpec.gaussian(mu, coeff, cutoff, envelope_in_basis=True),
        "expnorm": RadialSpec.exp_normal_basis(means, betas, 5.0 / cutoff, cutoff),
        "expnorm_lower": RadialSpec.exp_normal_basis(means, betas, 5.0 / (cutoff - 1.0), cutoff,
                                                     cutoff_lower=1.0, basis_lower=1.0),
    }


def filter_weights(K=8, F=32, seed=1, device="cpu", bias2=True):
    """Random filter network ``(A1 [F, K], a1 [F], A2 [F, F], b2 [F] or None)``."""
    g = torch.Generator().manual_seed(seed)
    A1 = torch.randn(F, K, generator=g) / K**0.5
    a1 = torch.randn(F, generator=g) * 0.1
    A2 = torch.randn(F, F, generator=g) / F**0.5
    b2 = torch.randn(F, generator=g) * 0.1 if bias2 else None
    return tuple(t.to(device) if t is not None else None for t in (A1, a1, A2, b2))


def rel_err(a, b) -> float:
    """``|a - b| / |b|`` in float64."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def central_differences(energy, pos: torch.Tensor, h: float = 1e-5) -> torch.Tensor:
    """Central finite differences of a scalar ``energy(pos)`` w.r.t. every coordinate."""
    fd = torch.zeros_like(pos)
    for idx in range(pos.numel()):
        step = torch.zeros_like(pos).view(-1)
        step[idx] = h
        step = step.view_as(pos)
        fd.view(-1)[idx] = (energy(pos + step) - energy(pos - step)) / (2 * h)
    return fd
