"""Prior energy terms: harmonic bonds and angles, Fourier dihedrals, repulsion, and the
terms that imported mlcg priors need (harmonic θ angles and impropers, exponential
repulsion, a constant energy; docs/mlcg-format.md §7.3–§7.4).

Each term holds its bead indices (within one molecule) and one parameter set
per term, as buffers, and maps positions ``(R, n, 3)`` to energies ``(R,)``
(kcal/mol). Formulas follow the CGSchNet ecosystem (docs/mlcg-format.md §7):
no ½ factors, angles harmonic in cos θ.
"""

from __future__ import annotations

import torch
from torch import nn

from workbench.model.geometry import (
    angle_cosines,
    bead_layout,
    bond_lengths,
    gather_beads,
    segment_gathers_on,
    torsions,
)


class PriorTerm(nn.Module):
    """Base class: a bonded or pair term with per-term parameter buffers.

    Subclasses set ``order`` (beads per term) and ``parameter_names`` and
    implement :meth:`term_energies`.

    Parameters
    ----------
    index : torch.Tensor, shape (P, order), int64
        Bead indices of each term.
    **parameters : torch.Tensor
        One tensor per name in ``parameter_names``, leading dimension P.
    """

    order: int = 2
    parameter_names: tuple[str, ...] = ()
    #: Parameters the energy is linear in (all together): multiplying them multiplies the
    #: term's energy (``workbench.training.energy_scales``); empty where none are.
    energy_parameters: tuple[str, ...] = ()
    #: The ``column`` of `bead_layout` that fits :meth:`fused_term`'s gradient rows.
    fused_layout: str | None = None

    def __init__(self, index: torch.Tensor, **parameters: torch.Tensor):
        super().__init__()
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1, self.order)
        missing = set(self.parameter_names) - set(parameters)
        extra = set(parameters) - set(self.parameter_names)
        if missing or extra:
            raise ValueError(
                f"{type(self).__name__} takes parameters {self.parameter_names}; "
                f"missing {sorted(missing)}, unexpected {sorted(extra)}"
            )
        self.register_buffer("index", index)
        for name in self.parameter_names:
            value = torch.as_tensor(parameters[name], dtype=torch.float32)
            if value.shape[:1] != index.shape[:1]:
                raise ValueError(
                    f"{type(self).__name__}.{name} has leading size {tuple(value.shape)[:1]}, "
                    f"expected {index.shape[0]} (one per term)"
                )
            self.register_buffer(name, value.clone())

    @property
    def num_terms(self) -> int:
        """Number of terms P."""
        return int(self.index.shape[0])

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        """Energy of every term, shape (R, P)."""
        raise NotImplementedError

    def fused_term(self, dtype: torch.dtype):
        """This term list for its Triton kernel (a ``kernels.term_rows.TermSpec``, parameters
        in ``dtype``), or None where it has none.

        Used inside :func:`~workbench.model.geometry.segment_gathers` (fused paths on CUDA):
        one kernel writes the energies and every bead's gradient, and the backward sums
        them per bead without atomics (see ``Potential.energy``, which runs all priors'
        kernels as one op).
        """
        return None

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        """Total energy per replica, shape (R,)."""
        if self.num_terms == 0:
            return pos.new_zeros(pos.shape[0])
        spec = self.fused_term(pos.dtype) if segment_gathers_on() else None
        if spec is not None:
            from kernels.term_rows import term_energies

            layout = bead_layout(self.index, self.fused_layout, pos.shape[1])
            return term_energies(pos, [spec], layout)
        return self.term_energies(pos).sum(-1)

    def extra_repr(self) -> str:
        return f"terms={self.num_terms}"


class HarmonicAngles(PriorTerm):
    """``E = k (cos θ − x0)²`` with ``x0 = cos θ0`` and ``k`` in kcal/mol (apex in column 1)."""

    order = 3
    parameter_names = ("x0", "k")
    energy_parameters = ("k",)

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        return self.k * (angle_cosines(pos, self.index) - self.x0) ** 2

    def fused_term(self, dtype: torch.dtype):
        from kernels.bonded_terms import angle_term

        return angle_term(self.index, self.x0.to(dtype), self.k.to(dtype))


class FourierDihedrals(PriorTerm):
    """``E = v0 + Σ_n [k1_n sin(nφ) + k2_n cos(nφ)]``, n = 1..D.

    Buffers ``k1s`` and ``k2s`` have shape (P, D), ``v0`` shape (P,).
    """

    order = 4
    parameter_names = ("k1s", "k2s", "v0")
    energy_parameters = ("k1s", "k2s", "v0")

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        phi = torsions(pos, self.index)
        n = torch.arange(1, self.k1s.shape[1] + 1, device=pos.device, dtype=pos.dtype)
        nphi = phi[..., None] * n
        return self.v0 + (self.k1s * torch.sin(nphi) + self.k2s * torch.cos(nphi)).sum(-1)

    def fused_term(self, dtype: torch.dtype):
        from kernels.bonded_terms import dihedral_term

        return dihedral_term(self.index, *(t.to(dtype) for t in (self.k1s, self.k2s, self.v0)))


class PairPrior(PriorTerm):
    """A pair term that the fused paths evaluate in one kernel (``kernels.pair_energies``).

    Subclasses name their form (``pair_form``, a key of ``kernels.PAIR_FORMS``) and give
    its two per-pair parameters (:meth:`pair_parameters`); :meth:`term_energies` is the
    reference.
    """

    order = 2
    pair_form: str = ""
    fused_layout = "pairs"

    def pair_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The kernel's ``a`` and ``b`` per pair, each shape (P,)."""
        raise NotImplementedError

    def fused_term(self, dtype: torch.dtype):
        from kernels.pair_terms import pair_term

        a, b = (t.to(dtype) for t in self.pair_parameters())
        return pair_term(self.index, a, b, self.pair_form)


class HarmonicBonds(PairPrior):
    """``E = k (r − x0)²`` with ``k`` in kcal/mol/Å², ``x0`` in Å."""

    parameter_names = ("x0", "k")
    energy_parameters = ("k",)
    pair_form = "harmonic"

    def pair_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x0, self.k

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        return self.k * (bond_lengths(pos, self.index) - self.x0) ** 2


class Repulsion(PairPrior):
    """``E = (σ / r)⁶`` (energy scale 1 kcal/mol, σ in Å) over a fixed pair list."""

    parameter_names = ("sigma",)
    pair_form = "power6"

    def pair_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.sigma, self.sigma

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        return (self.sigma / bond_lengths(pos, self.index)) ** 6


class CutoffRepulsion(PairPrior):
    """``(σ/r)⁶`` shifted and force-shifted to zero at ``r_x``, zero beyond it.

    ``E = (σ/r)⁶ − (σ/r_x)⁶ + 6 (σ/r_x)⁶ (r − r_x)/r_x`` for ``r < r_x`` (energy and force
    continuous at ``r_x``; the form of mlcg's ``CutoffRepulsion``). Buffers ``sigma`` and
    ``cutoff`` (= ``r_x``), Å, shape (P,). Unlike :class:`Repulsion` it adds nothing at
    distances beyond ``r_x``, so a network trained on top of it need not cancel a
    long-ranged background.
    """

    parameter_names = ("sigma", "cutoff")
    pair_form = "cutoff_power6"

    def pair_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.sigma, self.cutoff

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        r = bond_lengths(pos, self.index)
        edge6 = (self.sigma / self.cutoff) ** 6
        energy = (self.sigma / r) ** 6 - edge6 + 6.0 * edge6 * (r - self.cutoff) / self.cutoff
        return torch.where(r < self.cutoff, energy, torch.zeros_like(energy))


class NativeContacts(PairPrior):
    """12–10 wells at native distances: ``E = ε [5 (r0/r)¹² − 6 (r0/r)¹⁰]``.

    Minimum ``−ε`` at ``r = r0``; the structure-based (Gō-like) contact term.
    Buffers ``r0`` (Å) and ``epsilon`` (kcal/mol), shape (P,).
    """

    parameter_names = ("r0", "epsilon")
    energy_parameters = ("epsilon",)
    pair_form = "lj12_10"

    def pair_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.r0, self.epsilon

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        x2 = (self.r0 / bond_lengths(pos, self.index)) ** 2
        x10 = x2**5
        return self.epsilon * x10 * (5.0 * x2 - 6.0)


class ContactBarriers(PairPrior):
    """Gaussian desolvation barriers: ``E = h exp(−(r − c)² / (2 w²))``.

    Placed just outside native contacts (centre ``c`` beyond the well's ``r0``), they make
    a contact cost energy before it pays: partly formed contacts are penalised, so
    contacts form together and folding becomes more cooperative. Buffers ``center`` (Å)
    and ``height`` (kcal/mol), shape (P,); the width ``w`` is
    ``kernels.pair_terms.BARRIER_WIDTH`` (0.5 Å).
    """

    parameter_names = ("center", "height")
    energy_parameters = ("height",)
    pair_form = "gaussian"

    def pair_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.center, self.height

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        from kernels.pair_terms import BARRIER_WIDTH

        z = (bond_lengths(pos, self.index) - self.center) / BARRIER_WIDTH
        return self.height * torch.exp(-0.5 * z**2)


#: Prior classes by name, for saving and loading.
PRIOR_CLASSES: dict[str, type[PriorTerm]] = {
    cls.__name__: cls
    for cls in (
        HarmonicBonds, HarmonicAngles, FourierDihedrals, Repulsion, CutoffRepulsion,
        NativeContacts, ContactBarriers,
    )
}


def register_prior_class(cls: type[PriorTerm]) -> type[PriorTerm]:
    """Make a :class:`PriorTerm` subclass known to the model loader (usable as a decorator)."""
    PRIOR_CLASSES[cls.__name__] = cls
    return cls


def bend_angles(pos: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Angles θ in [0, π] of triplets ``(i, apex j, k)``, shape (R, P), radians.

    ``θ = atan2(|a × b|, a · b)`` with ``a = x_i − x_j``, ``b = x_k − x_j``.
    """
    a = gather_beads(pos, index, 0) - gather_beads(pos, index, 1)
    b = gather_beads(pos, index, 2) - gather_beads(pos, index, 1)
    cross = torch.linalg.vector_norm(torch.linalg.cross(a, b), dim=-1)
    return torch.atan2(cross, (a * b).sum(-1))


@register_prior_class
class HarmonicImpropers(PriorTerm):
    """``E = k (φ − x0)²`` on the torsion φ in (−π, π] (no periodic wrap), k in kcal/mol."""

    order = 4
    parameter_names = ("x0", "k")
    energy_parameters = ("k",)

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        return self.k * (torsions(pos, self.index) - self.x0) ** 2


@register_prior_class
class HarmonicThetaAngles(PriorTerm):
    """``E = k (θ − x0)²`` on the bend angle θ in radians (apex in column 1)."""

    order = 3
    parameter_names = ("x0", "k")
    energy_parameters = ("k",)

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        return self.k * (bend_angles(pos, self.index) - self.x0) ** 2


@register_prior_class
class ExpRepulsion(PriorTerm):
    """``E = (6 / α) exp(α (1 − r / r0))`` over a fixed pair list (α dimensionless, r0 in Å)."""

    order = 2
    parameter_names = ("alpha", "r0")

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        r = bond_lengths(pos, self.index)
        return 6.0 / self.alpha * torch.exp(self.alpha * (1.0 - r / self.r0))


@register_prior_class
class ConstantEnergy(PriorTerm):
    """Constant offsets ``E = Σ V0`` (the ``V0`` of specialised mlcg priors).

    ``index`` holds one bead per offset (the first bead of the term it came from);
    it is bookkeeping only and the energy does not depend on positions.
    """

    order = 1
    parameter_names = ("V0",)

    def term_energies(self, pos: torch.Tensor) -> torch.Tensor:
        return self.V0.to(pos.dtype).expand(pos.shape[0], -1)
