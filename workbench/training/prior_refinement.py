"""Bonded priors refitted to the teacher's forces (force matching of the priors alone).

Boltzmann inversion fits each bond, angle and dihedral to its own free energy
``−kT ln p(x)``. In a folded protein that free energy holds the pull of every contact
around the term, so the fitted wells are far deeper and narrower than the teacher's own
terms, and CGSchNet, trained on the teacher's forces minus the priors', has to take
much of them back. SchNet sees distances only: it cannot take back the chiral (odd in φ)
part of a dihedral prior at all, and what it takes back of the rest it carries past the
data (on 1YRF it cancels half of the dihedral priors' energy and the model's runs flip
backbone dihedrals, peptide bonds included, that the teacher never flips;
docs/decisions/0003-refined-bonded-priors.md).

Here the priors' energy is written as a linear combination of basis functions of each
term's feature ``x`` (bond length, angle cosine, torsion) around the Boltzmann-inverted
values, and the coefficients are fitted by linear least squares to the teacher's forces
minus those of the terms kept as they are (the repulsion):

- bonds and angles: ``a (x − c)² + b (x − c)`` with ``c`` the fitted ``x0``, so
  ``k = a`` and ``x0 = c − b / 2a`` (terms whose ``a`` comes out below
  ``MIN_FORCE_CONSTANT`` keep their fitted values);
- dihedrals: ``Σ_n k1_n sin(nφ) + k2_n cos(nφ)``, with ``v0`` set so that each term's
  minimum is zero.

A ridge of relative size ``ridge`` pulls each coefficient towards its Boltzmann-inverted
value, which keeps terms the data barely move well defined. The force of the combination
is ``F = G θ`` with ``G = −∂(basis)/∂x`` per frame, so ``θ`` solves
``(Σ GᵀG + Λ) θ = Σ Gᵀ F_target + Λ θ_BI``. The priors then hold what the teacher's
bonded terms hold, plus the projection of its contact forces on them, and SchNet is left
the contacts: pair terms, which it represents well.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch

from workbench.model.geometry import angle_cosines, bond_lengths, torsions
from workbench.model.priors import FourierDihedrals, HarmonicAngles, HarmonicBonds, PriorTerm
from workbench.training.boltzmann_inversion import MIN_FORCE_CONSTANT

#: Terms refitted, in this order, when present: the bonded ones.
REFINED_TERMS = ("bonds", "angles", "dihedrals")

#: Bytes of one block of the design matrix ``G`` (frames × 3n × coefficients, float64).
BLOCK_BYTES = 1 << 28


@dataclass
class Refinement:
    """What :func:`refine_priors` did.

    Attributes
    ----------
    terms : list of str
        Names of the refitted terms.
    frames : int
        Frames the least squares ran over.
    ridge : float
    coefficients : int
        Unknowns of the fit.
    force_rms_target : float
        RMS of the target forces (teacher minus the kept terms), kcal/mol/Å.
    residual_before, residual_after : float
        RMS force left to SchNet (target minus the refitted terms) with the
        Boltzmann-inverted and with the refitted parameters, kcal/mol/Å.
    kept : int
        Bond and angle terms whose refit had no well (``a < MIN_FORCE_CONSTANT``) and that
        keep their Boltzmann-inverted values.
    """

    terms: list[str]
    frames: int
    ridge: float
    coefficients: int
    force_rms_target: float
    residual_before: float
    residual_after: float
    kept: int

    def card(self) -> dict:
        """The model card's ``priors.refinement`` entry."""
        return {
            "method": "force matching of the bonded priors (linear least squares on the "
            "teacher's forces minus the repulsion's)",
            "terms": self.terms,
            "frames": self.frames,
            "ridge": self.ridge,
            "coefficients": self.coefficients,
            "force_rms_target": self.force_rms_target,
            "residual_force_rms_boltzmann": self.residual_before,
            "residual_force_rms_refined": self.residual_after,
            "terms_kept_without_a_well": self.kept,
        }


def _basis(term: PriorTerm) -> tuple[Callable, Callable[[torch.Tensor], list[torch.Tensor]]]:
    """The feature function of ``term`` and its basis functions of that feature."""
    if isinstance(term, FourierDihedrals):
        n = torch.arange(1, term.k1s.shape[1] + 1, dtype=torch.float64, device=term.k1s.device)

        def fourier(phi):
            angles = phi[..., None] * n
            return list(angles.sin().unbind(-1)) + list(angles.cos().unbind(-1))

        return torsions, fourier
    if isinstance(term, (HarmonicBonds, HarmonicAngles)):
        centre = term.x0.double()

        def harmonic(x):
            return [(x - centre) ** 2, x - centre]

        return bond_lengths if isinstance(term, HarmonicBonds) else angle_cosines, harmonic
    raise TypeError(f"no force-matching basis for {type(term).__name__}")


def _start(term: PriorTerm) -> torch.Tensor:
    """The Boltzmann-inverted coefficients of ``term`` in the order of its basis,
    shape (basis, P), float64."""
    if isinstance(term, FourierDihedrals):
        return torch.cat([term.k1s.T, term.k2s.T]).double()
    return torch.stack([term.k.double(), torch.zeros_like(term.k, dtype=torch.float64)])


def _design(terms: list[PriorTerm], pos: torch.Tensor) -> torch.Tensor:
    """``G = −∂(basis)/∂x`` of every term's basis functions, shape (B, 3n, K), float64.

    Each term's beads are gathered into a copy of their own, so the gradient of a basis
    function summed over terms is each term's gradient on its own beads; those are then
    added into the rows of the beads they act on.
    """
    batch, n = pos.shape[0], pos.shape[1]
    columns = []
    for term in terms:
        feature, basis = _basis(term)
        order = term.index.shape[1]
        local = pos[:, term.index].detach().requires_grad_(True)  # (B, P, order, 3)
        own = torch.arange(term.index.numel(), device=pos.device).reshape(-1, order)
        values = basis(feature(local.reshape(batch, -1, 3), own))
        count = term.index.shape[0]
        slot = torch.arange(count, device=pos.device)[:, None]
        xyz = torch.arange(3, device=pos.device)[None, :]
        for value in values:
            (grad,) = torch.autograd.grad(value.sum(), local, retain_graph=True)
            column = pos.new_zeros(batch, n * 3 * count)
            for k in range(order):  # row (bead, xyz) of each term's column p
                rows = ((term.index[:, k, None] * 3 + xyz) * count + slot).reshape(-1)
                column.index_add_(1, rows, -grad[:, :, k, :].reshape(batch, -1))
            columns.append(column.reshape(batch, 3 * n, count))
    return torch.cat(columns, -1)


def refine_priors(
    priors: dict[str, PriorTerm],
    positions: torch.Tensor,
    forces: torch.Tensor,
    frames: int = 4096,
    ridge: float = 1e-4,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> tuple[dict[str, PriorTerm], Refinement]:
    """The bonded priors refitted to ``forces`` by linear least squares (module docstring).

    Parameters
    ----------
    priors : dict of str to PriorTerm
        Boltzmann-inverted priors; ``bonds``, ``angles`` and ``dihedrals`` (those present)
        are refitted, every other term is kept and its forces are taken off the target.
    positions : torch.Tensor, shape (M, n, 3), float32
        Frames, Å.
    forces : torch.Tensor, shape (M, n, 3), float32
        The teacher's forces on them, kcal/mol/Å.
    frames : int
        At most this many frames, drawn at random (``seed``), enter the fit.
    ridge : float
        Relative weight ``α`` of the pull towards the Boltzmann-inverted coefficients:
        ``Λ = α · diag(Σ GᵀG)``. Must be positive.
    seed : int
    device : str or torch.device
        Where the least squares run (float64).

    Returns
    -------
    (dict of str to PriorTerm, Refinement)
        New priors (same names and order; the refitted terms new objects, on the CPU) and
        what the fit did.
    """
    if positions.shape != forces.shape or positions.ndim != 3:
        raise ValueError(f"positions and forces must both be (M, n, 3), got "
                         f"{tuple(positions.shape)} and {tuple(forces.shape)}")
    if not ridge > 0:
        raise ValueError(f"ridge must be positive, got {ridge}")
    names = [name for name in REFINED_TERMS if name in priors]
    if not names:
        raise ValueError(f"no bonded priors to refine: the priors are {list(priors)}")
    for name in names:
        _basis(priors[name])  # refuses a form without a basis before any work
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(positions.shape[0], generator=generator)[:frames]
    device = torch.device(device)
    # copies: Module.to moves a term in place, and the caller's priors stay where they are
    terms = [copy.deepcopy(priors[name]).to(device) for name in names]
    kept_terms = [copy.deepcopy(term).to(device) for name, term in priors.items()
                  if name not in names]
    n = positions.shape[1]
    start = torch.cat([_start(term).reshape(-1) for term in terms])
    size = start.numel()
    normal = torch.zeros(size, size, dtype=torch.float64, device=device)
    right = torch.zeros(size, dtype=torch.float64, device=device)
    target_square = 0.0
    block = max(1, BLOCK_BYTES // (8 * 3 * n * size))
    for part in chosen.split(block):
        pos = positions[part].to(device, torch.float64)
        target = forces[part].to(device, torch.float64)
        if kept_terms:
            with torch.enable_grad():
                x = pos.detach().requires_grad_(True)
                energy = sum(term(x).sum() for term in kept_terms)
                target = target + torch.autograd.grad(energy, x)[0]
        with torch.enable_grad():
            design = _design(terms, pos)
        flat = target.reshape(pos.shape[0], -1)
        normal += torch.einsum("bik,bil->kl", design, design)
        right += torch.einsum("bik,bi->k", design, flat)
        target_square += float(flat.square().sum())
    count = chosen.numel() * 3 * n
    weight = ridge * normal.diagonal().clamp(min=1e-12)
    solution = torch.linalg.solve(normal + torch.diag(weight), right + weight * start)

    def residual(theta):  # RMS of F_target − G θ from the accumulated sums
        square = target_square - 2 * theta @ right + theta @ normal @ theta
        return float(max(square, 0.0) / count) ** 0.5

    refined, offset, kept = dict(priors), 0, 0
    for name, term in zip(names, terms, strict=True):
        width = _start(term).numel()
        coefficients = solution[offset : offset + width].reshape(-1, term.num_terms).cpu()
        offset += width
        refined[name], dropped = _refitted(term.cpu(), coefficients)
        kept += dropped
    report = Refinement(
        terms=names, frames=int(chosen.numel()), ridge=float(ridge), coefficients=size,
        force_rms_target=(target_square / count) ** 0.5,
        residual_before=residual(start), residual_after=residual(solution), kept=kept,
    )
    return refined, report


def _refitted(term: PriorTerm, coefficients: torch.Tensor) -> tuple[PriorTerm, int]:
    """A new term of ``term``'s kind with the fitted ``coefficients`` (basis, P), and the
    number of terms that kept their old parameters."""
    if isinstance(term, FourierDihedrals):
        degree = term.k1s.shape[1]
        k1s, k2s = coefficients[:degree].T, coefficients[degree:].T
        grid = torch.linspace(-torch.pi, torch.pi, 721, dtype=torch.float64)[:, None, None]
        n = torch.arange(1, degree + 1, dtype=torch.float64)
        energy = (k1s * torch.sin(grid * n) + k2s * torch.cos(grid * n)).sum(-1)
        v0 = -energy.amin(0)
        return FourierDihedrals(term.index, k1s=k1s, k2s=k2s, v0=v0), 0
    a, b = coefficients
    well = a >= MIN_FORCE_CONSTANT
    centre = term.x0.double()
    x0 = torch.where(well, centre - b / (2 * a.clamp(min=MIN_FORCE_CONSTANT)), centre)
    k = torch.where(well, a, term.k.double())
    return type(term)(term.index, x0=x0, k=k), int((~well).sum())
