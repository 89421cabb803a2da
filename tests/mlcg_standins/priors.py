"""Stand-ins for mlcg's prior classes (docs/mlcg-format.md §7), evaluated directly.

Type-indexed priors look their parameters up in dense order-``o`` tables with
the bead types of each interaction (sparse tables are densified first);
``Static*`` priors hold one row per interaction of the collated neighbor list.
Energies are scattered into exactly B structures.
"""

from __future__ import annotations

import torch
from torch import nn


def distances(pos, m):
    return (pos[m[1]] - pos[m[0]]).norm(dim=-1)


def cosines(pos, m):
    a, b = pos[m[0]] - pos[m[1]], pos[m[2]] - pos[m[1]]
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))


def raw_angles(pos, m):
    a, b = pos[m[0]] - pos[m[1]], pos[m[2]] - pos[m[1]]
    return torch.atan2(torch.cross(a, b, dim=-1).norm(dim=-1), (a * b).sum(-1))


def torsions(pos, m):
    b1, b2, b3 = (pos[m[k + 1]] - pos[m[k]] for k in range(3))
    b1, b2, b3 = (b / b.norm(dim=-1, keepdim=True) for b in (b1, b2, b3))
    n1, n2 = torch.cross(b1, b2, dim=-1), torch.cross(b2, b3, dim=-1)
    return torch.atan2((torch.cross(n1, n2, dim=-1) * b2).sum(-1), (n1 * n2).sum(-1))


def _dense(table):
    return table.to_dense() if table.is_sparse else table


class _Prior(nn.Module):
    order = 2

    def energy(self, batch):
        group = batch["neighbor_list"][self.name]
        per_term = self.terms(batch["pos"], group["index_mapping"], batch)
        return torch.zeros(batch["n_structures"], dtype=batch["pos"].dtype).index_add(
            0, group["mapping_batch"], per_term
        )


class _TypeIndexed(_Prior):
    """Buffers are tables indexed by bead types; unknown type tuples give zeros."""

    def __init__(self, name, tables, keys, order=None):
        super().__init__()
        self.name = name
        self.order = order if order is not None else type(self).order
        self.allowed_interaction_keys = keys
        for key, table in tables.items():
            self.register_buffer(key, table)

    def lookup(self, key, mapping, batch, leading=False):
        types = tuple(batch["atom_types"][mapping[r]] for r in range(self.order))
        table = _dense(getattr(self, key))
        return table[(slice(None), *types)].T if leading else table[types]


class GeneralBonds(_TypeIndexed):
    order = 2

    def terms(self, pos, m, batch):
        x0, k = self.lookup("x_0", m, batch), self.lookup("k", m, batch)
        return k * (distances(pos, m) - x0) ** 2


class HarmonicBonds(GeneralBonds):
    pass


class GeneralAngles(_TypeIndexed):
    order = 3

    def terms(self, pos, m, batch):
        x0, k = self.lookup("x_0", m, batch), self.lookup("k", m, batch)
        return k * (cosines(pos, m) - x0) ** 2


class HarmonicAngles(GeneralAngles):
    pass


class HarmonicAnglesRaw(_TypeIndexed):
    order = 3

    def terms(self, pos, m, batch):
        x0, k = self.lookup("x_0", m, batch), self.lookup("k", m, batch)
        return k * (raw_angles(pos, m) - x0) ** 2


class HarmonicImpropers(_TypeIndexed):
    order = 4

    def terms(self, pos, m, batch):
        x0, k = self.lookup("x_0", m, batch), self.lookup("k", m, batch)
        return k * (torsions(pos, m) - x0) ** 2


def fourier(phi, k1s, k2s, v0):
    n = torch.arange(1, k1s.shape[1] + 1, dtype=phi.dtype)
    return v0 + (k1s * torch.sin(phi[:, None] * n) + k2s * torch.cos(phi[:, None] * n)).sum(1)


class Dihedral(_TypeIndexed):
    order = 4

    def __init__(self, name, tables, keys, n_degs):
        super().__init__(name, tables, keys)
        self.n_degs = n_degs
        self.k1_names = [f"k1_{i}" for i in range(1, n_degs + 1)]
        self.k2_names = [f"k2_{i}" for i in range(1, n_degs + 1)]

    def terms(self, pos, m, batch):
        k1s = self.lookup("k1s", m, batch, leading=True)
        k2s = self.lookup("k2s", m, batch, leading=True)
        return fourier(torsions(pos, m), k1s, k2s, self.lookup("v_0", m, batch))


class Repulsion(_TypeIndexed):
    order = 2

    def terms(self, pos, m, batch):
        return (self.lookup("sigma", m, batch) / distances(pos, m)) ** 6


class ExpRepulsion(_TypeIndexed):
    order = 2

    def terms(self, pos, m, batch):
        alpha, r0 = self.lookup("alpha", m, batch), self.lookup("r_0", m, batch)
        return 6.0 / alpha * torch.exp(alpha * (1.0 - distances(pos, m) / r0))


class _Static(_Prior):
    """One parameter row per interaction of the collated neighbor list; no ``name`` state."""

    def __init__(self, **params):
        super().__init__()
        self.param_names = list(params)
        for key, value in params.items():
            self.register_buffer(key, value)


class StaticGeneralBonds(_Static):
    name = "bonds"

    def terms(self, pos, m, batch):
        return self.k * (distances(pos, m) - self.x0) ** 2 + self.V0


class StaticHarmonicBonds(StaticGeneralBonds):
    pass


class StaticGeneralAngles(_Static):
    name = "angles"

    def terms(self, pos, m, batch):
        return self.k * (cosines(pos, m) - self.x0) ** 2 + self.V0


class StaticHarmonicAngles(StaticGeneralAngles):
    pass


class StaticHarmonicImpropers(_Static):
    name = "impropers"

    def terms(self, pos, m, batch):
        return self.k * (torsions(pos, m) - self.x0) ** 2 + self.V0


class StaticDihedral(_Static):
    name = "dihedrals"

    def terms(self, pos, m, batch):
        return fourier(torsions(pos, m), self.k1s, self.k2s, self.v_0[:, 0])


#: Prior stand-ins by module of the current layout.
PRIOR_MODULES = {
    "harmonic": (
        HarmonicBonds, HarmonicAngles, HarmonicAnglesRaw, HarmonicImpropers, GeneralBonds,
        GeneralAngles,
    ),
    "repulsion": (Repulsion, ExpRepulsion),
    "fourier_series": (Dihedral,),
}
STATIC_PRIORS = (
    StaticDihedral, StaticGeneralAngles, StaticGeneralBonds, StaticHarmonicBonds,
    StaticHarmonicAngles, StaticHarmonicImpropers,
)
