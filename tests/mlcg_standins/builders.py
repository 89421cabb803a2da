"""Random mlcg-style models and configurations built from the stand-ins.

Every builder takes a flavour namespace from :func:`install_standins` (so the
objects pickle under that flavour's class paths) and a ``torch.Generator``.
Topologies follow docs/mlcg-format.md §8 and are derived here, independently of
workbench code; five-bead coordinates come from the bundled CLN025 structure.
"""

from __future__ import annotations

import itertools
import math
from collections import deque

import numpy as np
import torch
from torch import nn

from . import data

#: CLN025 (YYDPETGTWY) in the CA checkpoint's typing (§8.2).
CLN_CA_TYPES = [20, 20, 3, 13, 4, 17, 6, 17, 19, 20]
CB_CODE = {"ALA": 1, "CYS": 2, "ASP": 3, "GLU": 4, "PHE": 5, "HIS": 7, "ILE": 8, "LYS": 9,
           "LEU": 10, "MET": 11, "ASN": 12, "PRO": 13, "GLN": 14, "ARG": 15, "SER": 16,
           "THR": 17, "VAL": 18, "TRP": 19, "TYR": 20}
CLN_SEQUENCE = ["TYR", "TYR", "ASP", "PRO", "GLU", "THR", "GLY", "THR", "TRP", "TYR"]


def uniform(gen, shape, low, high):
    return low + (high - low) * torch.rand(shape, generator=gen, dtype=torch.float64)


def linear(gen, n_in, n_out, bias=True, zero_bias=False):
    layer = nn.Linear(n_in, n_out, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n_out, n_in, generator=gen) / math.sqrt(n_in))
        if bias:
            layer.bias.copy_(0.0 if zero_bias else 0.1 * torch.randn(n_out, generator=gen))
    return layer


# -- SchNet ----------------------------------------------------------------------------


def schnet(ns, gen, *, cls="StandardSchNet", embedding_size=42, hidden=32, filters=16,
           num_rbf=12, blocks=2, widths=(16, 8), basis="gaussian", basis_cutoff=None,
           conv_cutoff=None, activation=nn.Tanh, filter_bias=False, inspector="new",
           alpha=None, flashmd=False, max_num_neighbors=200):
    """A randomly initialised StandardSchNet stand-in (§5.1)."""
    basis_cutoff = basis_cutoff or ns.CosineCutoff(0, 7.0)
    lower, upper = float(basis_cutoff.cutoff_lower), float(basis_cutoff.cutoff_upper)
    if basis == "gaussian":
        offset = torch.linspace(lower, upper, num_rbf) + 0.05 * torch.randn(num_rbf, generator=gen)
        coeff = torch.tensor(-0.5 / (upper - lower) ** 2 * num_rbf**2 * 0.8)
        rbf = ns.GaussianBasis(basis_cutoff, offset, coeff)
    else:
        span = upper - lower
        means = torch.linspace(math.exp(-span), 1.0, num_rbf) + 0.01 * torch.rand(
            num_rbf, generator=gen
        )
        betas = (2.0 / num_rbf * (1.0 - math.exp(-span))) ** -2 * (
            1.0 + 0.2 * torch.rand(num_rbf, generator=gen)
        )
        rbf = ns.ExpNormalBasis(basis_cutoff, means, betas, 5.0 / span if alpha is None else alpha)
    interaction_blocks = []
    for _ in range(blocks):
        conv_env = conv_cutoff() if conv_cutoff else ns.CosineCutoff(lower, upper)
        filter_network = ns.MLP(
            [linear(gen, num_rbf, filters), activation(),
             linear(gen, filters, filters, bias=filter_bias)]
        )
        aggr = ns.SumAggregation() if inspector == "new" else None
        conv = ns.CFConv(linear(gen, hidden, filters, bias=False), filter_network, conv_env,
                         linear(gen, filters, hidden), aggr_module=aggr)
        if inspector == "new":
            conv.inspector = ns.Inspector(type(conv), ns.Signature, ns.Parameter)
        elif inspector == "old":
            conv.inspector = ns.OldInspector(conv)
        block = ns.InteractionBlock(conv, activation(), linear(gen, hidden, hidden))
        if flashmd:
            conv.use_triton = False
            block.use_fused_tanh_linear = False
        interaction_blocks.append(block)
    out_layers = []
    sizes = [hidden, *widths, 1]
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        last = i == len(sizes) - 2
        out_layers.append(linear(gen, a, b, bias=not last))
        if not last:
            out_layers.append(activation())
    embedding = nn.Embedding(embedding_size, hidden)
    with torch.no_grad():
        embedding.weight.copy_(torch.randn(embedding_size, hidden, generator=gen))
    model = getattr(ns, cls)(embedding, rbf, interaction_blocks, ns.MLP(out_layers),
                             max_num_neighbors=max_num_neighbors)
    if flashmd:
        model._cached_gamma = None
        model.nls_distance_method = "torch"
    return model


# -- PaiNN -----------------------------------------------------------------------------


def painn(ns, gen, *, cls="StandardPaiNN", embedding_size=42, hidden=16, num_rbf=10, blocks=2,
          widths=(12, 8), basis="exp-normal", basis_cutoff=None, conv_cutoff=None,
          activation=nn.Tanh, epsilon=1e-8, max_num_neighbors=10000, vector_scale=1.0):
    """A randomly initialised StandardPaiNN stand-in (§5.4).

    One envelope module is shared by all interaction blocks (as mlcg builds it);
    ``vector_scale`` multiplies the weights that feed the vector features, so that
    they matter in the energy.
    """
    basis_cutoff = basis_cutoff or ns.CosineCutoff(0, 7.0)
    lower, upper = float(basis_cutoff.cutoff_lower), float(basis_cutoff.cutoff_upper)
    if basis == "gaussian":
        offset = torch.linspace(lower, upper, num_rbf) + 0.05 * torch.randn(num_rbf, generator=gen)
        coeff = torch.tensor(-0.5 / (upper - lower) ** 2 * num_rbf**2 * 0.8)
        rbf = ns.GaussianBasis(basis_cutoff, offset, coeff)
    else:
        span = upper - lower
        means = torch.linspace(math.exp(-span), 1.0, num_rbf) + 0.01 * torch.rand(
            num_rbf, generator=gen
        )
        betas = (2.0 / num_rbf * (1.0 - math.exp(-span))) ** -2 * (
            1.0 + 0.2 * torch.rand(num_rbf, generator=gen)
        )
        rbf = ns.ExpNormalBasis(basis_cutoff, means, betas, 5.0 / span)
    conv_env = conv_cutoff if conv_cutoff is not None else ns.CosineCutoff(lower, upper)
    interactions, mixings = [], []
    for _ in range(blocks):
        context = nn.Sequential(linear(gen, hidden, hidden), activation(),
                                linear(gen, hidden, 3 * hidden))
        filter_network = linear(gen, num_rbf, 3 * hidden)
        with torch.no_grad():
            filter_network.weight[hidden:] *= vector_scale
        interactions.append(ns.PaiNNInteraction(hidden, context, filter_network, conv_env))
        intra = nn.Sequential(linear(gen, 2 * hidden, hidden), activation(),
                              linear(gen, hidden, 3 * hidden))
        mix = linear(gen, hidden, 2 * hidden, bias=False)
        with torch.no_grad():
            mix.weight.mul_(vector_scale)
        mixings.append(ns.PaiNNMixing(hidden, intra, mix, epsilon))
    out_layers = []
    sizes = [hidden, *widths, 1]
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        last = i == len(sizes) - 2
        out_layers.append(linear(gen, a, b, bias=not last))
        if not last:
            out_layers.append(activation())
    embedding = nn.Embedding(embedding_size, hidden)
    with torch.no_grad():
        embedding.weight.copy_(torch.randn(embedding_size, hidden, generator=gen))
    return getattr(ns, cls)(embedding, rbf, interactions, mixings, ns.MLP(out_layers),
                            max_num_neighbors=max_num_neighbors)


def specialised_painn_ca(ns, gen, **kwargs):
    """The specialised CA case of :func:`specialised_ca` with a PaiNN network."""
    model, configs = specialised_ca(ns, gen)
    entries = {"PaiNN": ns.GradientsOut(painn(ns, gen, **kwargs))}
    entries.update({k: w for k, w in model.models.items() if k != "SchNet"})
    return ns.SumOut(entries), configs


# -- CA chignolin ------------------------------------------------------------------------


def ca_positions(gen, n=10, noise=0.1, origin=(110.0, 150.0, 130.0)):
    """A noisy helix of n CA beads (~3.8 Å apart), not centred."""
    i = torch.arange(n, dtype=torch.float64)
    angle = i * math.radians(100.0)
    helix = torch.stack([2.3 * torch.cos(angle), 2.3 * torch.sin(angle), 1.5 * i], dim=1)
    return (helix + noise * torch.randn(n, 3, generator=gen, dtype=torch.float64)
            + torch.tensor(origin)).float()


def ca_topology(n=10):
    """Index mappings of the CA groups (§8.2): bonds, angles, dihedrals, non_bonded."""
    return {
        "bonds": torch.tensor([[i, i + 1] for i in range(n - 1)]).T,
        "angles": torch.tensor([[i, i + 1, i + 2] for i in range(n - 2)]).T,
        "dihedrals": torch.tensor([[i, i + 1, i + 2, i + 3] for i in range(n - 3)]).T,
        "non_bonded": torch.tensor([[i, j] for i in range(n) for j in range(i + 3, n)]).T,
    }


def configuration(ns, positions, types, groups, masses, extra=None):
    """An AtomicData stand-in with the fields of §4.1."""
    n = len(types)
    fields = {
        "pos": positions,
        "atom_types": torch.tensor(types),
        "n_atoms": torch.tensor([n]),
        "masses": masses,
        "neighbor_list": {k: data.neighbor_group(tag, m) for k, (tag, m) in groups.items()},
        "out": {},
        "traj_id": 3398,
        "frame_id": 480,
        "name": "cln",
        "forces": torch.zeros(n, 3),
        **(extra or {}),
    }
    return ns.AtomicData(ns.GlobalStorage, fields)


def ca_configurations(ns, gen, groups, count=2, extra=None):
    masses = torch.full((10,), 12.0 / 418.4, dtype=torch.float32)
    return [configuration(ns, ca_positions(gen), CLN_CA_TYPES, groups, masses, extra)
            for _ in range(count)]


def _symmetric_table(gen, side, low, high, types):
    table = torch.zeros(side, side)
    keys = []
    for a, b in itertools.product(sorted(set(types)), repeat=2):
        if a <= b:
            table[a, b] = table[b, a] = float(uniform(gen, (), low, high))
        keys.append((np.int64(a), np.int64(b)))
    return table, keys


def specialised_ca(ns, gen):
    """``(SumOut, [2 AtomicData])`` as in §9.1: exp-normal SchNet, Repulsion + Static*."""
    topo = ca_topology()
    model = schnet(ns, gen, basis="exp-normal", basis_cutoff=ns.CosineCutoff(0, 8.0),
                   conv_cutoff=lambda: ns.CosineCutoff(0.0, 8.0), hidden=64, filters=32,
                   num_rbf=16, blocks=3, widths=(32, 16))
    sigma, keys = _symmetric_table(gen, 21, 3.0, 4.0, CLN_CA_TYPES)
    n_dih, n_ang, n_bond = 7, 8, 9

    def tiled(block):
        return torch.cat([block, block])

    v_0 = torch.randn(n_dih, 5, generator=gen)
    priors = {
        "non_bonded": ns.Repulsion("non_bonded", {"sigma": sigma}, keys),
        "dihedrals": ns.StaticDihedral(
            k1s=tiled(0.5 * torch.randn(n_dih, 5, generator=gen)),
            k2s=tiled(0.5 * torch.randn(n_dih, 5, generator=gen)), v_0=tiled(v_0)),
        "angles": ns.StaticGeneralAngles(
            x0=tiled(torch.cos(torch.deg2rad(uniform(gen, n_ang, 105, 115))).float()),
            k=tiled(uniform(gen, n_ang, 8, 22).float()), V0=torch.zeros(2 * n_ang)),
        "bonds": ns.StaticGeneralBonds(
            x0=tiled(uniform(gen, n_bond, 3.82, 3.87).float()),
            k=tiled(uniform(gen, n_bond, 74, 84).float()), V0=torch.zeros(2 * n_bond)),
    }
    tags = {"non_bonded": "non_bonded", "dihedrals": "StaticDihedral",
            "angles": "StaticGeneralAngles", "bonds": "StaticGeneralBonds"}
    groups = {k: (tags[k], topo[k]) for k in tags}
    return sum_out(ns, model, priors), ca_configurations(ns, gen, groups)


def sum_out(ns, model, priors):
    entries = {} if model is None else {"SchNet": ns.GradientsOut(model)}
    entries.update({k: ns.GradientsOut(p, name=k) for k, p in priors.items()})
    return ns.SumOut(entries)


def flashmd_ca(ns, gen):
    """flashmd ``(SumOut, configurations)``: Gaussian SchNet with a filter bias, ExpRepulsion,
    general raw-angle prior and Static bonds (with V0), angles, dihedrals, impropers."""
    topo = ca_topology()
    model = schnet(ns, gen, cls="SchNet", basis="gaussian", basis_cutoff=ns.CosineCutoff(0, 7.5),
                   filter_bias=True, flashmd=True)
    alpha, keys = _symmetric_table(gen, 21, 3.0, 6.0, CLN_CA_TYPES)
    r_0, _ = _symmetric_table(gen, 21, 3.5, 4.5, CLN_CA_TYPES)
    theta0, theta_keys = _angle_table(gen, CLN_CA_TYPES, topo["angles"])
    k_theta = torch.where(theta0 != 0, 10.0, 0.0)

    def tiled(values):
        return torch.cat([values, values]).float()

    priors = {
        "non_bonded": ns.ExpRepulsion("non_bonded", {"alpha": alpha, "r_0": r_0}, keys),
        "theta": ns.HarmonicAnglesRaw("theta", {"x_0": theta0, "k": k_theta}, theta_keys),
        "bonds": ns.StaticHarmonicBonds(x0=tiled(uniform(gen, 9, 3.7, 3.9)),
                                        k=tiled(uniform(gen, 9, 50, 90)),
                                        V0=tiled(uniform(gen, 9, -1, 1))),
        "angles": ns.StaticHarmonicAngles(x0=tiled(uniform(gen, 8, -0.4, -0.2)),
                                          k=tiled(uniform(gen, 8, 5, 20)), V0=torch.zeros(16)),
        "dihedrals": ns.StaticDihedral(k1s=tiled(torch.randn(7, 3, generator=gen)),
                                       k2s=tiled(torch.randn(7, 3, generator=gen)),
                                       v_0=tiled(torch.randn(7, 3, generator=gen))),
        "impropers": ns.StaticHarmonicImpropers(x0=tiled(uniform(gen, 7, 0.5, 1.5)),
                                                k=tiled(uniform(gen, 7, 1, 3)),
                                                V0=tiled(uniform(gen, 7, 0, 2))),
    }
    groups = {
        "non_bonded": ("non_bonded", topo["non_bonded"]),
        "theta": ("theta", topo["angles"]),
        "bonds": ("StaticHarmonicBonds", topo["bonds"]),
        "angles": ("StaticHarmonicAngles", topo["angles"]),
        "dihedrals": ("StaticDihedral", topo["dihedrals"]),
        "impropers": ("StaticHarmonicImpropers", topo["dihedrals"]),
    }
    return sum_out(ns, model, priors), ca_configurations(ns, gen, groups)


def general_ca_priors(ns, gen):
    """Type-indexed CA priors (dense tables, current layout) for the groups of ``ca_topology``."""
    topo = ca_topology()
    x0, keys = _symmetric_table(gen, 21, 3.7, 3.9, CLN_CA_TYPES)
    k, _ = _symmetric_table(gen, 21, 50.0, 90.0, CLN_CA_TYPES)
    sigma, _ = _symmetric_table(gen, 21, 3.0, 4.0, CLN_CA_TYPES)
    cos0, angle_keys = _oriented_table(gen, topo["angles"], -0.4, -0.2)
    k_angle, _ = _oriented_table(gen, topo["angles"], 5.0, 20.0)
    k1s, dihedral_keys = _oriented_table(gen, topo["dihedrals"], -1.0, 1.0, lead=2)
    k2s, _ = _oriented_table(gen, topo["dihedrals"], -1.0, 1.0, lead=2)
    v_0, _ = _oriented_table(gen, topo["dihedrals"], -1.0, 1.0)
    return {
        "bonds": ns.HarmonicBonds("bonds", {"x_0": x0, "k": k}, keys),
        "angles": ns.HarmonicAngles("angles", {"x_0": cos0, "k": k_angle}, angle_keys),
        "dihedrals": ns.Dihedral("dihedrals", {"k1s": k1s, "k2s": k2s, "v_0": v_0},
                                 dihedral_keys, n_degs=2),
        "non_bonded": ns.Repulsion("non_bonded", {"sigma": sigma}, keys),
    }


def _oriented_table(gen, mapping, low, high, lead=None):
    """Table [(lead,) T...] with one random value per type tuple of ``mapping`` and its reverse."""
    order = mapping.shape[0]
    table = torch.zeros(*(() if lead is None else (lead,)), *(21,) * order)
    keys = []
    for term in mapping.T.tolist():
        key = tuple(CLN_CA_TYPES[i] for i in term)
        value = uniform(gen, () if lead is None else (lead,), low, high).float()
        for oriented in (key, key[::-1]):
            table[(slice(None),) * (lead is not None) + oriented] = value
            keys.append(oriented)
    return table, keys


def _angle_table(gen, types, mapping):
    """θ0 table [T, T, T] over the type triplets of ``mapping`` (both orientations)."""
    table = torch.zeros(21, 21, 21)
    keys = []
    for a, b, c in mapping.T.tolist():
        key = (types[a], types[b], types[c])
        value = float(uniform(gen, (), 1.7, 2.1))
        table[key] = table[key[::-1]] = value
        keys += [key, key[::-1]]
    return table, keys


# -- five-bead CLN025 -------------------------------------------------------------------


def five_bead_residues():
    """Per residue, bead name -> index, in the N, CA, [CB], C, O order (§8.1)."""
    residues, index = [], 0
    for name in CLN_SEQUENCE:
        beads = ["N", "CA", "C", "O"] if name == "GLY" else ["N", "CA", "CB", "C", "O"]
        residues.append({b: index + k for k, b in enumerate(beads)})
        index += len(beads)
    return residues


def five_bead_types():
    types = []
    for name, beads in zip(CLN_SEQUENCE, five_bead_residues(), strict=True):
        code = {"N": 21, "CA": 6 if name == "GLY" else 22, "C": 23, "O": 24,
                "CB": CB_CODE.get(name)}
        types += [code[b] for b in beads]
    return types


def five_bead_groups():
    """Ordered group name -> (order, index_mapping) of the five-bead priors (§8.1)."""
    residues = five_bead_residues()
    last = len(residues) - 1
    bonds = []
    for r, atoms in enumerate(residues):
        bonds += [(atoms[a], atoms[b]) for a, b in
                  (("N", "CA"), ("CA", "CB"), ("CA", "C"), ("C", "O")) if b in atoms]
        if r < last:
            bonds.append((atoms["C"], residues[r + 1]["N"]))
    n = residues[-1]["O"] + 1
    residue_of = {i: r for r, atoms in enumerate(residues) for i in atoms.values()}
    neighbours = {i: [] for i in range(n)}
    for a, b in bonds:
        neighbours[a].append(b)
        neighbours[b].append(a)
    angles = [(a, apex, c) for apex in range(n)
              for a, c in itertools.combinations(sorted(neighbours[apex]), 2)]

    def terminal_split(terms, kind):
        out = {f"n_term_{kind}": [], f"bulk_{kind}": [], f"c_term_{kind}": []}
        for term in terms:
            res = {residue_of[i] for i in term}
            key = "n_term" if 0 in res else "c_term" if last in res else "bulk"
            out[f"{key}_{kind}"].append(term)
        return out

    groups = {**terminal_split(bonds, "bonds"), **terminal_split(angles, "angles")}
    for kind in ("phi", "psi"):
        for name in ["ALA", *sorted(set(CLN_SEQUENCE))]:
            groups[f"{name}_{kind}"] = []
    groups.update(pro_omega=[], non_pro_omega=[], gamma_1=[], gamma_2=[])
    for r, atoms in enumerate(residues):
        name = CLN_SEQUENCE[r]
        if r > 0:
            groups[f"{name}_phi"].append(
                (residues[r - 1]["C"], atoms["N"], atoms["CA"], atoms["C"]))
        if r < last:
            nxt = residues[r + 1]
            groups[f"{name}_psi"].append((atoms["N"], atoms["CA"], atoms["C"], nxt["N"]))
            omega = "pro_omega" if CLN_SEQUENCE[r + 1] == "PRO" else "non_pro_omega"
            groups[omega].append((atoms["CA"], atoms["C"], nxt["N"], nxt["CA"]))
            groups["gamma_2"].append((atoms["CA"], atoms["O"], nxt["N"], atoms["C"]))
        if "CB" in atoms:
            groups["gamma_1"].append((atoms["N"], atoms["CB"], atoms["C"], atoms["CA"]))
    groups["non_bonded"] = [
        (i, j) for i in range(n) for j in range(i + 1, n) if _separation(neighbours, i, j) >= 5
    ]
    order = {"bonds": 2, "angles": 3, "non_bonded": 2}
    return {
        key: torch.tensor(terms, dtype=torch.long).reshape(
            -1, order.get(key.split("_")[-1], order.get(key, 4))).T
        for key, terms in groups.items()
    }


def _separation(neighbours, i, j):
    seen, queue = {i: 0}, deque([i])
    while queue:
        a = queue.popleft()
        for b in neighbours[a]:
            if b not in seen:
                seen[b] = seen[a] + 1
                queue.append(b)
    return seen.get(j, 1 << 30)


def _geometry(kind, pos, term):
    p = [pos[i].double() for i in term]
    if kind == 2:
        return float((p[1] - p[0]).norm())
    a, b = p[0] - p[1], p[2] - p[1]
    return float((a @ b) / (a.norm() * b.norm()))


def _sparse_table(values, side, lead=()):
    table = torch.zeros(*lead, *(side,) * len(next(iter(values))))
    for key, value in values.items():
        table[(slice(None),) * len(lead) + key] = value
    return table.to_sparse()


def five_bead_priors(ns, gen, positions, groups, drop_key=True):
    """General (type-indexed) priors with sparse tables for the five-bead groups."""
    types = five_bead_types()
    priors = {}
    for name, mapping in groups.items():
        terms = mapping.T.tolist()
        keys = {tuple(types[i] for i in t) for t in terms}
        keys |= {k[::-1] for k in keys}
        if not keys:
            keys = {(22, 21, 22, 23), (23, 22, 21, 22)}
        side = 1 + max(max(k) for k in keys)
        order = mapping.shape[0]
        if name == "non_bonded":
            sigma = torch.zeros(25, 25)
            upper = uniform(gen, (24, 24), 2.4, 3.8).float()
            sigma[1:, 1:] = torch.triu(upper) + torch.triu(upper, 1).T
            all_keys = [(np.int64(a), np.int64(b)) for a in range(1, 25) for b in range(1, 25)]
            priors[name] = ns.Repulsion(name, {"sigma": sigma}, all_keys)
        elif order in (2, 3):
            observed = {}
            for t in terms:
                key = tuple(types[i] for i in t)
                observed.setdefault(min(key, key[::-1]), []).append(_geometry(order, positions, t))
            x0, k = {}, {}
            for key, values in observed.items():
                mean = sum(values) / len(values) + float(uniform(gen, (), -0.05, 0.05))
                low, high = (100, 300) if order == 2 else (20, 90)
                stiff = float(uniform(gen, (), low, high))
                for oriented in (key, key[::-1]):
                    x0[oriented], k[oriented] = mean, stiff
            if drop_key and name == "bulk_angles":
                dropped = next(iter(observed))
                for oriented in (dropped, dropped[::-1]):
                    del x0[oriented], k[oriented]
            cls = ns.GeneralBonds if order == 2 else ns.GeneralAngles
            priors[name] = cls(name, {"x_0": _sparse_table(x0, side), "k": _sparse_table(k, side)},
                               sorted(x0))
        else:
            n_degs = 1 if name in ("PRO_phi", "non_pro_omega", "gamma_1", "gamma_2") else (
                2 if name == "pro_omega" else 3)
            k1, k2, v0 = {}, {}, {}
            for key in sorted(keys):
                k1[key] = 0.5 * torch.randn(n_degs, generator=gen)
                k2[key] = 0.5 * torch.randn(n_degs, generator=gen)
                v0[key] = float(0.5 * torch.randn((), generator=gen))
            tables = {"k1s": _sparse_table(k1, side, (n_degs,)),
                      "k2s": _sparse_table(k2, side, (n_degs,)), "v_0": _sparse_table(v0, side)}
            priors[name] = ns.Dihedral(name, tables, sorted(keys), n_degs)
    return priors


def five_bead_case(ns, gen, positions, with_schnet=True):
    """``model_and_prior`` SumOut (Gaussian SchNet, IdentityCutoff basis, old inspector) and
    two configurations (the given geometry and a perturbed copy)."""
    groups = five_bead_groups()
    priors = five_bead_priors(ns, gen, positions, groups)
    model = None
    if with_schnet:
        model = schnet(ns, gen, embedding_size=25, hidden=32, filters=32, num_rbf=20,
                       widths=(16,), basis="gaussian", basis_cutoff=ns.IdentityCutoff(0, 7.0),
                       conv_cutoff=lambda: ns.CosineCutoff(0, 7.0), inspector="old",
                       max_num_neighbors=1000)
    types = five_bead_types()
    masses = torch.tensor([{21: 14.0, 24: 16.0}.get(t, 12.0) / 418.4 for t in types],
                          dtype=torch.float64)
    tagged = {k: (k, m) for k, m in groups.items()}
    configs = [
        configuration(ns, p, types, tagged, masses)
        for p in (positions, positions + 0.05 * torch.randn(positions.shape, generator=gen))
    ]
    return sum_out(ns, model, priors), priors, configs
