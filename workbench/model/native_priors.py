"""Prior terms centred on a native structure, and the untrained demo potential.

Used until trained models exist for a protein: bonds and angles at their native
values, dihedrals with a single cosine minimum at the native angle, 12–10 wells
between bead pairs in native contact (residues at least three apart, beads
within ``contact_cutoff`` in the native structure), and a soft repulsion between
the other non-bonded pairs whose σ never exceeds 90 % of the pair's native
distance (so the native structure is not pushed apart).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from workbench.model.architectures import ARCHITECTURES, build_network, output_parameters
from workbench.model.geometry import angle_cosines, bond_lengths, torsions
from workbench.model.network_config import NetworkConfig
from workbench.model.potential import Potential
from workbench.model.priors import (
    ContactBarriers,
    FourierDihedrals,
    HarmonicAngles,
    HarmonicBonds,
    NativeContacts,
    Repulsion,
)
from workbench.system.cg_system import CGSystem
from workbench.system.topology import nonbonded_pairs

#: Distance of a contact's desolvation barrier beyond its native distance, Å (about one
#: water layer's half-width; the barrier's width is 0.5 Å).
BARRIER_OFFSET = 1.5


def native_priors(
    system: CGSystem,
    bond_k: float = 150.0,
    angle_k: float = 60.0,
    dihedral_k: float = 1.0,
    sigma: float = 3.5,
    contact_epsilon: float = 0.5,
    contact_cutoff: float = 6.5,
    contact_separation: int = 3,
    contact_barrier: float = 0.0,
) -> dict[str, torch.nn.Module]:
    """Priors whose minima lie at the native structure.

    Parameters
    ----------
    system : CGSystem
    bond_k : float
        kcal/mol/Å² (energy ``k (r − r0)²``).
    angle_k : float
        kcal/mol (energy ``k (cos θ − cos θ0)²``).
    dihedral_k : float
        kcal/mol (energy ``k (1 − cos(φ − φ0))``).
    sigma : float
        Largest repulsion radius, Å.
    contact_epsilon : float
        Depth of each native-contact well, kcal/mol (0 leaves contacts out).
    contact_cutoff : float
        Native bead distance below which a pair is a contact, Å.
    contact_separation : int
        Smallest residue separation of a contact (closer pairs repel): larger values leave
        the local contacts of helices and turns out, which makes folding more cooperative.
    contact_barrier : float
        Height of a desolvation barrier (:class:`ContactBarriers`) ``BARRIER_OFFSET``
        beyond each contact's native distance, as a multiple of ``contact_epsilon``
        (0: none).

    Returns
    -------
    dict of str to PriorTerm
        ``bonds``, ``angles``, ``dihedrals``, ``repulsion`` and, when
        ``contact_epsilon > 0``, ``contacts`` (and ``barriers`` with a ``contact_barrier``).
    """
    native = system.native_positions[None].double()
    r0 = bond_lengths(native, system.bonds)[0]
    cos0 = angle_cosines(native, system.angles)[0]
    phi0 = torsions(native, system.dihedrals)[0]
    pairs = nonbonded_pairs(system)
    pair_native = bond_lengths(native, pairs)[0]
    residue = system.bead_residue
    in_contact = (pair_native < contact_cutoff) & (
        (residue[pairs[:, 1]] - residue[pairs[:, 0]]).abs() >= contact_separation
    )
    if contact_epsilon <= 0:
        in_contact = torch.zeros_like(in_contact)
    n_dih = system.dihedrals.shape[0]
    terms = {
        "bonds": HarmonicBonds(system.bonds, x0=r0, k=torch.full_like(r0, bond_k)),
        "angles": HarmonicAngles(system.angles, x0=cos0, k=torch.full_like(cos0, angle_k)),
        "dihedrals": FourierDihedrals(
            system.dihedrals,
            k1s=(-dihedral_k * torch.sin(phi0)).reshape(n_dih, 1),
            k2s=(-dihedral_k * torch.cos(phi0)).reshape(n_dih, 1),
            v0=torch.full((n_dih,), dihedral_k, dtype=torch.float64),
        ),
        "repulsion": Repulsion(
            pairs[~in_contact], sigma=torch.clamp(0.9 * pair_native[~in_contact], max=sigma)
        ),
    }
    if in_contact.any():
        r0 = pair_native[in_contact]
        terms["contacts"] = NativeContacts(
            pairs[in_contact], r0=r0, epsilon=torch.full_like(r0, contact_epsilon)
        )
        if contact_barrier > 0:
            terms["barriers"] = ContactBarriers(
                pairs[in_contact], center=r0 + BARRIER_OFFSET,
                height=torch.full_like(r0, contact_barrier * contact_epsilon),
            )
    return terms


def demo_config(system: CGSystem, architecture: str) -> NetworkConfig:
    """The demo network's config: its config class's defaults (CGSchNet: hidden 128, filters
    128, 3 blocks, 50 Gaussian RBF, cutoff 10 Å); a Deep Potential's with deepmd-kit's
    neighbour slots for ``system``'s native structure
    (`workbench.model.deep_potential.structure_sel`) and ``num_neighbors`` their sum, so
    that deepmd-kit can evaluate it too (``--dp-backend deepmd``). Its statistics stay the
    identity, so the slots change nothing on the engine's path.

    Parameters
    ----------
    system : CGSystem
    architecture : str
        A key of `workbench.model.architectures.ARCHITECTURES`.
    """
    config = ARCHITECTURES[architecture].config_class()()
    if architecture != "dp":
        return config
    from workbench.model.deep_potential import structure_sel

    sel = structure_sel(system.native_positions, system.bead_types, config.cutoff,
                        config.embedding_size)
    return replace(config, sel=sel, num_neighbors=float(sum(sel)))


def demo_potential(
    system: CGSystem,
    config=None,
    seed: int = 0,
    output_scale: float = 0.01,
    architecture: str = "schnet",
) -> Potential:
    """A randomly initialised network with small output weights plus native priors.

    This is not a trained model: it exists to exercise the engine until trained
    checkpoints ship, and callers must say so to the user
    (``potential.metadata["trained"]`` is False).

    Parameters
    ----------
    system : CGSystem
    config : dataclass, optional
        The network's config (of ``architecture``); default `demo_config`.
    seed : int
        Seed of the weight initialisation.
    output_scale : float
        Factor applied to the last output layer's weights
        (`workbench.model.architectures.output_parameters`).
    architecture : str
        A key of `workbench.model.architectures.ARCHITECTURES` (``"schnet"``,
        ``"painn"``, ``"egnn"``, ``"nequip"``, ``"dp"``).

    Raises
    ------
    ValueError
        An unknown architecture.
    """
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown network architecture {architecture!r}; known: "
                         f"{sorted(ARCHITECTURES)}")
    config = config or demo_config(system, architecture)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        network = build_network(architecture, config)
    finally:
        torch.random.set_rng_state(generator_state)
    with torch.no_grad():
        output_parameters(network)[0].mul_(output_scale)
    potential = Potential(system.bead_types, network, native_priors(system))
    name = ARCHITECTURES[architecture].network
    potential.metadata = {
        "trained": False,
        "description": f"untrained demo model: random {name} + priors and native-contact "
        f"wells fitted to the native structure of {system.name}",
        "protein": system.name,
        "mapping": system.mapping,
    }
    return potential
