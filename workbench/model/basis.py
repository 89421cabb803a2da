"""Radial bases and cutoff envelopes of CGSchNet (docs/mlcg-format.md §6).

All modules map distances ``d`` of shape ``(E,)`` (float32, Å) to per-edge
values; autograd differentiates through them, so forces include the
derivatives of the basis and of the envelope.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class CosineCutoff(nn.Module):
    """Cosine envelope.

    For ``lower == 0``: ``C(d) = ½ (cos(π d / upper) + 1)`` for ``d < upper``, else 0.
    For ``lower > 0``: a bump that is 0 at ``lower``, 1 at the midpoint and 0 at
    ``upper`` (mlcg's definition).

    Parameters
    ----------
    lower, upper : float
        Cutoff radii in Å.
    """

    def __init__(self, lower: float = 0.0, upper: float = 10.0):
        super().__init__()
        if not upper > lower >= 0.0:
            raise ValueError(f"cosine cutoff needs 0 <= lower < upper, got {lower}, {upper}")
        self.lower = float(lower)
        self.upper = float(upper)

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        """Envelope values, shape of ``d``."""
        if self.lower > 0.0:
            x = 2.0 * (d - self.lower) / (self.upper - self.lower) + 1.0
            inside = (d < self.upper) & (d > self.lower)
        else:
            x = d / self.upper
            inside = d < self.upper
        return torch.where(inside, 0.5 * (torch.cos(math.pi * x) + 1.0), torch.zeros_like(d))

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}"


class IdentityCutoff(nn.Module):
    """Envelope equal to one everywhere (no masking).

    Parameters
    ----------
    lower, upper : float
        Recorded only; ``upper`` is the graph radius when this is a basis cutoff.
    """

    def __init__(self, lower: float = 0.0, upper: float = math.inf):
        super().__init__()
        self.lower = float(lower)
        self.upper = float(upper)

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        """Ones, shape of ``d``."""
        return torch.ones_like(d)


def make_cutoff(kind: str, lower: float, upper: float) -> nn.Module:
    """Build an envelope by name: ``"cosine"`` or ``"identity"``."""
    if kind == "cosine":
        return CosineCutoff(lower, upper)
    if kind == "identity":
        return IdentityCutoff(lower, upper)
    raise ValueError(f"unknown cutoff kind {kind!r}; expected 'cosine' or 'identity'")


def cutoff_kind(module: nn.Module) -> str:
    """Name of an envelope module, the inverse of :func:`make_cutoff`."""
    return "cosine" if isinstance(module, CosineCutoff) else "identity"


class GaussianBasis(nn.Module):
    """Gaussians ``φ_k(d) = exp(coeff (d − μ_k)²) · C_basis(d)``.

    Parameters
    ----------
    cutoff : nn.Module
        Envelope applied inside the basis (``CosineCutoff`` or ``IdentityCutoff``);
        its ``upper`` value is the graph radius.
    num_rbf : int
        Number of functions K; centres are ``linspace(lower, upper, K)`` and
        ``coeff = −½ / Δμ²`` unless ``offset``/``coeff`` are given.
    offset : torch.Tensor, shape (K,), optional
    coeff : torch.Tensor, shape (), optional
    """

    def __init__(
        self,
        cutoff: nn.Module,
        num_rbf: int = 50,
        offset: torch.Tensor | None = None,
        coeff: torch.Tensor | None = None,
    ):
        super().__init__()
        self.cutoff = cutoff
        if offset is None:
            offset = torch.linspace(cutoff.lower, cutoff.upper, num_rbf)
        if coeff is None:
            coeff = torch.tensor(-0.5 / float(offset[1] - offset[0]) ** 2)
        self.register_buffer("offset", offset.detach().clone().float())
        self.register_buffer("coeff", coeff.detach().clone().float().reshape(()))

    @property
    def num_rbf(self) -> int:
        """Number of basis functions K."""
        return int(self.offset.shape[0])

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        """Basis values, shape ``(E, K)`` float32."""
        diff = d[:, None] - self.offset[None, :]
        return torch.exp(self.coeff * diff * diff) * self.cutoff(d)[:, None]


class ExpNormalBasis(nn.Module):
    """Exp-normal functions ``φ_k(d) = C_basis(d) exp(−β_k (exp(α (r_l − d)) − μ_k)²)``.

    Parameters
    ----------
    cutoff : nn.Module
        Envelope inside the basis; ``lower`` is r_l and ``upper`` the graph radius.
    num_rbf : int
        K; defaults follow mlcg: ``μ = linspace(exp(−(r_c − r_l)), 1, K)``,
        ``β_k = (2/K (1 − exp(−(r_c − r_l))))^−2``, ``α = 5 / (r_c − r_l)``.
    means, betas : torch.Tensor, shape (K,), optional
    alpha : float, optional
    """

    def __init__(
        self,
        cutoff: nn.Module,
        num_rbf: int = 50,
        means: torch.Tensor | None = None,
        betas: torch.Tensor | None = None,
        alpha: float | None = None,
    ):
        super().__init__()
        self.cutoff = cutoff
        span = cutoff.upper - cutoff.lower
        if means is None:
            means = torch.linspace(math.exp(-span), 1.0, num_rbf)
        if betas is None:
            betas = torch.full((num_rbf,), (2.0 / num_rbf * (1.0 - math.exp(-span))) ** -2)
        self.alpha = float(5.0 / span if alpha is None else alpha)
        self.register_buffer("means", means.detach().clone().float())
        self.register_buffer("betas", betas.detach().clone().float())

    @property
    def num_rbf(self) -> int:
        """Number of basis functions K."""
        return int(self.means.shape[0])

    def forward(self, d: torch.Tensor) -> torch.Tensor:
        """Basis values, shape ``(E, K)`` float32."""
        z = torch.exp(self.alpha * (self.cutoff.lower - d))[:, None] - self.means[None, :]
        return torch.exp(-self.betas[None, :] * z * z) * self.cutoff(d)[:, None]

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


#: Radial bases by the name a network config gives (``config.basis``).
BASES = {"gaussian": GaussianBasis, "exp-normal": ExpNormalBasis}


def make_basis(kind: str, envelope: str, lower: float, upper: float, num_rbf: int) -> nn.Module:
    """A network's radial basis with its default parameters.

    Parameters
    ----------
    kind : {"gaussian", "exp-normal"}
        A key of `BASES`.
    envelope : str
        The envelope inside the basis (`make_cutoff`).
    lower, upper : float
        The basis's range, Å (``upper`` the graph radius).
    num_rbf : int
        K, the number of functions.

    Raises
    ------
    ValueError
        An unknown basis.
    """
    if kind not in BASES:
        raise ValueError(f"unknown basis {kind!r}; use 'gaussian' or 'exp-normal'")
    return BASES[kind](make_cutoff(envelope, lower, upper), num_rbf)
