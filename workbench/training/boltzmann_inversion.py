"""Priors fitted to sampled structures by Boltzmann inversion (the CGSchNet convention).

The free energy of a feature x is ``F(x) = −kT ln p(x)``, estimated from a histogram.
Bonds are fitted by ``k (r − x0)²`` and angles by ``k (cos θ − x0)²`` (weighted least
squares, each bin weighted by its count), dihedrals by a Fourier series in φ, and the
repulsion radius σ of a non-bonded pair is its closest approach in the data (its
repulsion ``(σ/r)⁶`` is then 1 kcal/mol there; the ``"cutoff"`` form shifts that to zero
at ``REPULSION_RANGE · σ``, the ``"edge"`` form at σ itself), or the smallest closest
approach of its class of pairs (:func:`repulsion_sigma`). Parameters are fitted per term
or per class of terms (terms whose bead types agree, in either direction), pooling the
samples of a class.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workbench.model.geometry import angle_cosines, bond_lengths, torsions
from workbench.model.priors import (
    CutoffRepulsion,
    FourierDihedrals,
    HarmonicAngles,
    HarmonicBonds,
    PriorTerm,
    Repulsion,
)
from workbench.system.cg_system import CGSystem
from workbench.system.topology import graph_distances, nonbonded_pairs
from workbench.units import KB

#: Forms of the fitted repulsion: ``"power"`` (σ/r)⁶ over all distances, ``"cutoff"`` the
#: same shifted to zero at ``REPULSION_RANGE · σ`` (:class:`CutoffRepulsion`), ``"edge"``
#: shifted to zero at σ, the closest approach itself: ``(σ/r)⁶ − 1 + 6 (r − σ)/σ`` below
#: it (1.6 kcal/mol at 0.8 σ, 5.7 at 0.7 σ, 18 at 0.6 σ), nothing wherever the data went.
#: The other two forms add energy across the data (a pair near its σ), and a network
#: trained on top learns to cancel it; on 1YRF it cancels the cutoff walls' energy with
#: a slope of −1.1 over the teacher's frames, and carries that cancellation past the
#: data, where it should hold the beads apart.
REPULSION_FORMS = ("power", "cutoff", "edge")

#: ``r_x / σ`` of the ``"cutoff"`` repulsion (its energy at σ is then 0.42 kcal/mol). On
#: CLN025 teacher frames it sums to ~2 kcal/mol where the power form sums to ~98.
REPULSION_RANGE = 1.25

#: Ways to group terms whose samples are pooled for one fit.
GROUPINGS = ("term", "type")

#: How the repulsion's σ is shared among pairs (:func:`repulsion_sigma`).
REPULSION_GROUPINGS = ("pair", "type", "name", "sequence", "touching")

#: Residue separations at and beyond which pairs of the ``"sequence"`` grouping share one
#: class (closer pairs, such as O(i)–O(i+4) of a helix, get a class per separation).
SEQUENCE_CLASSES = 5

#: Closest approach, Å, below which a pair of the ``"touching"`` grouping keeps its own σ:
#: above the closest approaches of nearly all five-bead native contacts (99 % of 1YRF's
#: lie below 6.25 Å over 64 teacher frames), below the 8–20 Å of pairs across the fold
#: (whose own σ would cage the sampled structures).
TOUCH_RANGE = 6.5

#: Bond-graph separations at and beyond which repulsion pairs share one class in a
#: grouped fit (closer pairs, such as 1-5, get classes of their own).
SHARED_SEPARATION = 5

#: Smallest force constant a harmonic fit returns (a flat histogram fits no well).
MIN_FORCE_CONSTANT = 1e-3


def term_groups(bead_types: torch.Tensor, index: torch.Tensor, grouping: str) -> torch.Tensor:
    """Group of each term: itself, or its class of bead-type tuples.

    Parameters
    ----------
    bead_types : torch.Tensor, shape (n,), int64
    index : torch.Tensor, shape (P, order), int64
    grouping : {"term", "type"}
        ``"type"`` puts terms with the same bead types, read forwards or backwards,
        in one group.

    Returns
    -------
    torch.Tensor, shape (P,), int64
        Group ids 0..G−1.
    """
    if grouping not in GROUPINGS:
        raise ValueError(f"unknown grouping {grouping!r}; use one of {GROUPINGS}")
    if grouping == "term":
        return torch.arange(index.shape[0])
    base = int(bead_types.max()) + 1
    types = bead_types[index]
    weights = base ** torch.arange(index.shape[1] - 1, -1, -1)
    keys = torch.minimum((types * weights).sum(1), (types.flip(-1) * weights).sum(1))
    return torch.unique(keys, return_inverse=True)[1]


def pooled_histograms(
    samples: torch.Tensor,
    groups: torch.Tensor,
    bins: int,
    value_range: tuple[float, float] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Histogram of every group's pooled samples.

    Parameters
    ----------
    samples : torch.Tensor, shape (M, P), float64
        One column per term.
    groups : torch.Tensor, shape (P,), int64
        Group of each term, 0..G−1.
    bins : int
    value_range : (float, float), optional
        Common range of all histograms; default each group's own sample range.

    Returns
    -------
    centres : torch.Tensor, shape (G, bins), float64
    counts : torch.Tensor, shape (G, bins), float64
    """
    n_groups = int(groups.max()) + 1
    member = groups.expand_as(samples).reshape(-1)
    flat = samples.reshape(-1)
    if value_range is None:
        low = torch.full((n_groups,), torch.inf, dtype=flat.dtype)
        high = torch.full((n_groups,), -torch.inf, dtype=flat.dtype)
        low = low.scatter_reduce(0, member, flat, "amin")
        high = high.scatter_reduce(0, member, flat, "amax")
    else:
        low = torch.full((n_groups,), float(value_range[0]), dtype=flat.dtype)
        high = torch.full((n_groups,), float(value_range[1]), dtype=flat.dtype)
    width = torch.clamp((high - low) / bins, min=1e-12)
    slot = ((flat - low[member]) / width[member]).floor().clamp(0, bins - 1).long()
    counts = torch.zeros(n_groups * bins, dtype=flat.dtype)
    counts.index_add_(0, member * bins + slot, torch.ones_like(flat))
    centres = low[:, None] + (torch.arange(bins, dtype=flat.dtype) + 0.5) * width[:, None]
    return centres, counts.reshape(n_groups, bins)


def fit_harmonic(
    samples: torch.Tensor, kT: float, groups: torch.Tensor | None = None, bins: int = 60
) -> tuple[torch.Tensor, torch.Tensor]:
    """Harmonic ``k (x − x0)²`` fitted to ``−kT ln p(x)`` of each group.

    Weighted least squares of a parabola through the histogram's free energies, each
    bin weighted by its count (the inverse variance of ``ln`` of a Poisson count).

    Parameters
    ----------
    samples : torch.Tensor, shape (M, P), float
        Feature samples (distances in Å or angle cosines), one column per term.
    kT : float
        kcal/mol.
    groups : torch.Tensor, shape (P,), int64, optional
        Terms fitted together; default each term alone.
    bins : int

    Returns
    -------
    x0 : torch.Tensor, shape (P,), float64
    k : torch.Tensor, shape (P,), float64
        At least ``MIN_FORCE_CONSTANT``.
    """
    samples = samples.detach().to(torch.float64)
    groups = torch.arange(samples.shape[1]) if groups is None else groups.cpu()
    centres, counts = pooled_histograms(samples, groups, bins)
    # centre and scale each group's coordinate so the 3-column design is well conditioned
    mean = (centres * counts).sum(1, keepdim=True) / counts.sum(1, keepdim=True)
    spread = ((centres - mean) ** 2 * counts).sum(1, keepdim=True) / counts.sum(1, keepdim=True)
    scale = torch.sqrt(torch.clamp(spread, min=1e-24))
    u = (centres - mean) / scale
    free = torch.where(counts > 0, -kT * torch.log(torch.clamp(counts, min=1.0)), 0.0)
    weight = torch.sqrt(counts)
    design = torch.stack([u**2, u, torch.ones_like(u)], -1) * weight[..., None]
    coef = torch.linalg.lstsq(design, (free * weight)[..., None]).solution[..., 0]
    curvature = torch.clamp(coef[:, 0], min=MIN_FORCE_CONSTANT * scale[:, 0] ** 2)
    k = curvature / scale[:, 0] ** 2
    x0 = mean[:, 0] - coef[:, 1] * scale[:, 0] / (2.0 * curvature)
    return x0[groups], k[groups]


def fit_fourier(
    phi: torch.Tensor,
    kT: float,
    groups: torch.Tensor | None = None,
    degree: int = 3,
    bins: int = 72,
    pseudo_count: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fourier series ``v0 + Σ_n k1_n sin(nφ) + k2_n cos(nφ)`` fitted to ``−kT ln p(φ)``.

    ``pseudo_count`` is added to every bin, so unvisited angles get a finite free
    energy (about ``kT ln(samples per bin)`` above the minimum); the series is then
    fitted to all bins by ordinary least squares, and ``v0`` makes the lowest bin zero.

    Parameters
    ----------
    phi : torch.Tensor, shape (M, P), float
        Torsions in (−π, π], radians.
    kT : float
        kcal/mol.
    groups : torch.Tensor, shape (P,), int64, optional
    degree : int
        Highest harmonic D.
    bins : int
    pseudo_count : float

    Returns
    -------
    k1s, k2s : torch.Tensor, shape (P, D), float64
    v0 : torch.Tensor, shape (P,), float64
    """
    if degree < 1:
        raise ValueError(f"the Fourier series needs degree >= 1, got {degree}")
    phi = phi.detach().to(torch.float64)
    groups = torch.arange(phi.shape[1]) if groups is None else groups.cpu()
    centres, counts = pooled_histograms(phi, groups, bins, (-torch.pi, torch.pi))
    free = -kT * torch.log(counts + pseudo_count)
    free = free - free.amin(1, keepdim=True)
    n = torch.arange(1, degree + 1, dtype=torch.float64)
    angles = centres[..., None] * n
    design = torch.cat([torch.ones_like(centres)[..., None], angles.sin(), angles.cos()], -1)
    coef = torch.linalg.lstsq(design, free[..., None]).solution[..., 0]
    return coef[:, 1 : degree + 1][groups], coef[:, degree + 1 :][groups], coef[:, 0][groups]


def non_native_minima(dihedrals: FourierDihedrals, native: torch.Tensor,
                      points: int = 720) -> torch.Tensor:
    """Which dihedral priors have a local minimum more than 90° from the native angle.

    Such a minimum offers a flipped backbone dihedral a place to settle where no data
    showed one: the series' ringing on the flat free energy of unvisited angles
    (`fit_priors`). With the teacher's other terms these minima are too shallow to hold a
    flip on their own (docs/decisions/0003-refined-bonded-priors.md).

    Parameters
    ----------
    dihedrals : FourierDihedrals
        P terms.
    native : torch.Tensor, shape (P,), float
        Native torsions, radians.
    points : int
        Grid points over (−π, π] on which minima are found.

    Returns
    -------
    torch.Tensor, shape (P,), bool
    """
    phi = torch.linspace(-torch.pi, torch.pi, points + 1, dtype=torch.float64)[1:]
    n = torch.arange(1, dihedrals.k1s.shape[1] + 1, dtype=torch.float64)
    k1s, k2s = dihedrals.k1s.detach().cpu().double(), dihedrals.k2s.detach().cpu().double()
    energy = (k1s[:, None] * torch.sin(phi[:, None] * n)
              + k2s[:, None] * torch.cos(phi[:, None] * n)).sum(-1)  # (P, points), periodic
    minimum = (energy < energy.roll(1, 1)) & (energy < energy.roll(-1, 1))
    far = torch.cos(phi[None] - native.detach().cpu().double()[:, None]) < 0.0
    return (minimum & far).any(1)


def sample_features(
    positions: torch.Tensor,
    index: torch.Tensor,
    feature: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    chunk: int = 4096,
) -> torch.Tensor:
    """A geometric feature of every term in every frame, in float64.

    Parameters
    ----------
    positions : torch.Tensor, shape (M, n, 3), float
    index : torch.Tensor, shape (P, order), int64
    feature : callable
        One of :mod:`workbench.model.geometry`'s functions.
    chunk : int
        Frames converted to float64 at once.

    Returns
    -------
    torch.Tensor, shape (M, P), float64
    """
    return torch.cat(
        [
            feature(positions[start : start + chunk].to(torch.float64), index)
            for start in range(0, positions.shape[0], chunk)
        ]
    )


def closest_approach(
    positions: torch.Tensor, pairs: torch.Tensor, chunk: int = 256
) -> torch.Tensor:
    """Smallest distance of each pair over all frames, Å.

    Parameters
    ----------
    positions : torch.Tensor, shape (M, n, 3), float
    pairs : torch.Tensor, shape (P, 2), int64
    chunk : int
        Frames per block (a block holds ``chunk × P`` distances).

    Returns
    -------
    torch.Tensor, shape (P,), float64
    """
    closest = torch.full((pairs.shape[0],), torch.inf, dtype=torch.float64)
    for start in range(0, positions.shape[0], chunk):
        block = bond_lengths(positions[start : start + chunk].to(torch.float64), pairs)
        closest = torch.minimum(closest, block.amin(0))
    return closest


def _check_repulsion_grouping(grouping: str) -> None:
    if grouping not in REPULSION_GROUPINGS:
        raise ValueError(
            f"unknown repulsion grouping {grouping!r}; use one of {REPULSION_GROUPINGS}"
        )


def repulsion_sigma(
    system: CGSystem, positions: torch.Tensor, pairs: torch.Tensor, grouping: str = "pair"
) -> torch.Tensor:
    """σ of every repulsion pair: the closest approach in the data, of the pair or of its class.

    With ``"pair"`` every pair keeps its own closest approach. Pairs that lie far apart in
    the fold then repel at the shortest distance they reached in the data: the prior
    becomes a cage of the sampled structures (on 1YRF's teacher frames its energy is
    ~300 kcal/mol with a spread of ~35, all of which SchNet must cancel). A class shares
    the smallest closest approach of its members, a hard core that holds wherever the data
    went: ``"type"`` puts pairs of the same two bead types in one class (mlcg's
    convention), ``"name"`` pairs of the same two bead names (N, CA, CB, C, O), whatever
    the residues. ``"sequence"`` splits the type classes further by residue separation
    (1, 2, … up to :data:`SEQUENCE_CLASSES` and beyond): the chain holds near neighbours
    in their own geometry, so O(i)–O(i+4) of a helix never comes closer than ~4 Å while
    O(i)–O(i+1) reaches ~2.2 Å, and a class of both would wall the helix pairs off only at
    2.2 Å, where a network trained on top extrapolates into overlapping beads. Pairs fewer
    than :data:`SHARED_SEPARATION` bonds apart (1-5 pairs) form classes of their own in
    every grouping, since the chain lets them come closer than pairs across the fold.
    ``"touching"`` is ``"sequence"`` except for pairs that came within :data:`TOUCH_RANGE`
    of each other in the data: they keep their own closest approach, so beads in contact
    (a native contact of the fold, say) are walled where the data found their wall, not at
    their class's smallest approach (on 1YRF a half to nine tenths of their native
    distance, where a network extrapolating past the data squashed them together).

    Parameters
    ----------
    system : CGSystem
    positions : torch.Tensor, shape (M, n, 3), float
    pairs : torch.Tensor, shape (P, 2), int64
    grouping : {"pair", "type", "name", "sequence", "touching"}

    Returns
    -------
    torch.Tensor, shape (P,), float64
        Å.
    """
    _check_repulsion_grouping(grouping)
    closest = closest_approach(positions, pairs)
    if grouping == "pair" or pairs.shape[0] == 0:
        return closest
    if grouping == "name":
        names = sorted(set(system.bead_names))
        labels = torch.tensor([names.index(name) for name in system.bead_names])
    else:
        labels = system.bead_types.cpu()
    classes = term_groups(labels, pairs, "type")
    separation = graph_distances(system.n_beads, system.bonds)[pairs[:, 0], pairs[:, 1]]
    keys = classes * (SHARED_SEPARATION + 1) + separation.clamp(max=SHARED_SEPARATION)
    if grouping in ("sequence", "touching"):
        residue = system.bead_residue.cpu()
        apart = (residue[pairs[:, 1]] - residue[pairs[:, 0]]).abs()
        keys = keys * (SEQUENCE_CLASSES + 1) + apart.clamp(max=SEQUENCE_CLASSES)
    groups = torch.unique(keys, return_inverse=True)[1]
    smallest = torch.full((int(groups.max()) + 1,), torch.inf, dtype=torch.float64)
    shared = smallest.scatter_reduce(0, groups, closest, "amin")[groups]
    if grouping == "touching":
        return torch.where(closest < TOUCH_RANGE, closest, shared)
    return shared


def fit_priors(
    system: CGSystem,
    positions: torch.Tensor,
    temperature: float,
    grouping: str = "term",
    bins: int = 60,
    dihedral_degree: int = 3,
    repulsion: str = "power",
    repulsion_separation: int | None = None,
    repulsion_grouping: str = "pair",
    repulsion_positions: torch.Tensor | None = None,
) -> dict[str, PriorTerm]:
    """Bond, angle, dihedral and repulsion priors of ``system`` fitted to sampled frames.

    Parameters
    ----------
    system : CGSystem
    positions : torch.Tensor, shape (M, n, 3), float
        Frames sampled at ``temperature``.
    temperature : float
        Kelvin.
    grouping : {"term", "type"}
        Fit each term alone, or each class of bead-type tuples (:func:`term_groups`);
        bonds, angles and dihedrals only (the repulsion has ``repulsion_grouping``).
    bins : int
        Histogram bins of the harmonic fits (the dihedral fit uses 72 over 2π).
    dihedral_degree : int
        Highest harmonic of the dihedral series (`fit_fourier`). The fit runs over every
        bin, and the angles a folded protein never visits share one flat free energy
        (the pseudo-count's), so a series of degree 3 rings next to a narrow native well:
        it has further minima on that plateau (`non_native_minima`; 157 of the 169
        dihedral priors of the shipped 1YRF model). Degree 1, ``a cos(φ − φ_min)``, the
        teacher's own form, has exactly one minimum.
    repulsion : {"power", "cutoff", "edge"}
        Form of the repulsion (``REPULSION_FORMS``).
    repulsion_separation : int, optional
        Smallest bond-graph separation of a repelling pair; default the mapping's
        (:func:`~workbench.system.topology.nonbonded_pairs`: 5 bonds for five-bead, as
        mlcg). 4 also keeps the 1-5 pairs apart (say O of one residue and CB of the next),
        which otherwise only the angle and dihedral priors hold.
    repulsion_grouping : {"pair", "type", "name", "sequence", "touching"}
        Which pairs share one σ (:func:`repulsion_sigma`).
    repulsion_positions : torch.Tensor, shape (M', n, 3), float, optional
        Frames the repulsion's σ is fitted to; default ``positions``. The ``"edge"`` form
        adds nothing on the frames it was fitted to, so given all the frames a network is
        trained on (every temperature), it adds nothing on any of them.

    Returns
    -------
    dict of str to PriorTerm
        ``bonds``, ``angles``, ``dihedrals``, ``repulsion`` (pairs of
        :func:`~workbench.system.topology.nonbonded_pairs`).
    """
    if repulsion not in REPULSION_FORMS:
        raise ValueError(f"repulsion must be one of {REPULSION_FORMS}, got {repulsion!r}")
    _check_repulsion_grouping(repulsion_grouping)
    if repulsion_separation is not None and repulsion_separation < 4:
        raise ValueError(
            f"repulsion separation must be at least 4 bonds (closer pairs are held by the "
            f"bond, angle and dihedral priors), got {repulsion_separation}"
        )
    kT = KB * float(temperature)
    positions = positions.detach().cpu()
    types = system.bead_types.cpu()

    def harmonic(index, feature):
        samples = sample_features(positions, index, feature)
        return fit_harmonic(samples, kT, term_groups(types, index, grouping), bins)

    bond_x0, bond_k = harmonic(system.bonds, bond_lengths)
    angle_x0, angle_k = harmonic(system.angles, angle_cosines)
    phi = sample_features(positions, system.dihedrals, torsions)
    k1s, k2s, v0 = fit_fourier(
        phi, kT, term_groups(types, system.dihedrals, grouping), dihedral_degree
    )
    pairs = nonbonded_pairs(system, repulsion_separation)
    sigma = repulsion_sigma(
        system, positions if repulsion_positions is None else repulsion_positions.detach().cpu(),
        pairs, repulsion_grouping,
    )
    return {
        "bonds": HarmonicBonds(system.bonds, x0=bond_x0, k=bond_k),
        "angles": HarmonicAngles(system.angles, x0=angle_x0, k=angle_k),
        "dihedrals": FourierDihedrals(system.dihedrals, k1s=k1s, k2s=k2s, v0=v0),
        "repulsion": Repulsion(pairs, sigma=sigma) if repulsion == "power"
        else CutoffRepulsion(pairs, sigma=sigma,
                             cutoff=sigma if repulsion == "edge" else REPULSION_RANGE * sigma),
    }
