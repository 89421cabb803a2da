"""Input statistics of a Deep Potential's descriptor, computed from frames as deepmd-kit does.

A Deep Potential with neighbour slots (``DeepPotentialConfig.sel``) normalises each row of
its environment matrix by per-centre-type statistics, ``R̂_ij = (R̃_ij − μ_{t_i}) / σ_{t_i}``
(`CGDeepPotential.normalised_environment`; buffers ``env_mean``, ``env_std``, shape (T, 4)).
deepmd-kit sets them from its training data before training (``compute_input_stats``); with
the identity (zero means, unit deviations) the embedding networks see ``s(r)`` itself, a
narrow range near zero, and learn slowly.

The formulas are deepmd-kit's (``EnvMatStatSe``). For each centre type ``t``, over every
slot of every centre of that type in the frames (``Σ sel`` slots per centre; the empty
ones count, with ``R̃ = 0``; the neighbours that find no slot, as deepmd-kit's list builder
drops them, do not):

* ``μ_t = (mean of s, 0, 0, 0)``;
* ``σ_t = (σ_s, σ_a, σ_a, σ_a)``, ``σ_s`` the deviation of ``s`` and ``σ_a`` that of the
  three direction columns ``s·x/r, s·y/r, s·z/r`` pooled; a deviation below ``1e-2`` is
  raised to ``1e-2``;
* a type with no centre in the frames keeps ``μ = 0`` and ``σ = 0.1``.
"""

from __future__ import annotations

import torch

from workbench.model.deep_potential import CGDeepPotential, smooth_switch
from workbench.model.deepmd_interop import typed_neighbor_list
from workbench.neighbors import Graph, cell_list_pairs

#: Smallest deviation kept (deepmd-kit's ``protection``).
PROTECTION = 1e-2
#: Deviation of a type with no centre in the frames (deepmd-kit's default).
DEFAULT_STD = 0.1


def environment_statistics(
    network: CGDeepPotential, positions: torch.Tensor, types: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``env_mean`` and ``env_std`` of ``network`` from frames (module docstring).

    Parameters
    ----------
    network : CGDeepPotential
        With ``config.sel``; its cutoffs and slots are used, its weights are not.
    positions : torch.Tensor, shape (F, n, 3)
        Frames, Å.
    types : torch.Tensor, shape (n,), int64
        Bead types, in ``[0, embedding_size)``.

    Returns
    -------
    env_mean, env_std : torch.Tensor, shape (T, 4), float64
    """
    config = network.config
    if config.sel is None:
        raise ValueError("descriptor statistics need neighbour slots (config.sel): a network "
                         "without them normalises nothing")
    if positions.ndim != 3 or positions.shape[1:] != (types.numel(), 3):
        raise ValueError(f"positions must be (frames, {types.numel()}, 3), got "
                         f"{tuple(positions.shape)}")
    size = config.embedding_size
    types = types.to(torch.long).cpu()
    sums = torch.zeros(size, 4, dtype=torch.float64)  # s, s², a, a² over real slots
    centres = torch.zeros(size, dtype=torch.float64)
    for frame in positions.detach().cpu():
        pos = frame.to(torch.float64)
        src, dst = cell_list_pairs(frame.float(), config.cutoff)
        graph = Graph(src, dst, types.numel())
        nlist, _ = typed_neighbor_list(pos, types, graph, config.cutoff, config.sel)
        centre, slot = (nlist >= 0).nonzero(as_tuple=True)
        diff = pos.index_select(0, nlist[centre, slot]) - pos.index_select(0, centre)
        r = torch.linalg.vector_norm(diff, dim=-1)
        s = smooth_switch(r, config.cutoff_smooth, config.cutoff) / r
        a = diff * (s / r)[:, None]
        rows = torch.stack([s, s * s, a.sum(-1), (a * a).sum(-1)], -1)
        sums.index_add_(0, types.index_select(0, centre), rows)
        centres += torch.bincount(types, minlength=size)
    slots = centres * sum(config.sel)  # the empty ones count, with R̃ = 0
    seen = slots > 0
    count = slots.clamp(min=1.0)
    mean_s = sums[:, 0] / count
    std_s = (sums[:, 1] / count - mean_s**2).clamp(min=0.0).sqrt()
    mean_a = sums[:, 2] / (3 * count)
    std_a = (sums[:, 3] / (3 * count) - mean_a**2).clamp(min=0.0).sqrt()
    env_mean = torch.zeros(size, 4, dtype=torch.float64)
    env_mean[:, 0] = torch.where(seen, mean_s, 0.0)
    std = torch.stack([std_s, std_a, std_a, std_a], -1).clamp(min=PROTECTION)
    env_std = torch.where(seen[:, None], std, torch.full_like(std, DEFAULT_STD))
    return env_mean, env_std


def set_environment_statistics(
    network: CGDeepPotential, positions: torch.Tensor, types: torch.Tensor
) -> dict:
    """Set ``network``'s ``env_mean`` and ``env_std`` from frames (`environment_statistics`)
    in place; what the model card records of them.

    Returns
    -------
    dict
        ``frames``, and the means and deviations of the types that have centres.
    """
    env_mean, env_std = environment_statistics(network, positions, types)
    with torch.no_grad():
        network.env_mean.copy_(env_mean)
        network.env_std.copy_(env_std)
    present = sorted(set(types.tolist()))
    return {
        "method": "deepmd-kit's input statistics (mean of s; deviations of s and of the "
                  "direction columns, empty slots counted, at least 1e-2)",
        "frames": int(positions.shape[0]),
        "types": present,
        "mean_s": [round(float(env_mean[t, 0]), 6) for t in present],
        "std_s": [round(float(env_std[t, 0]), 6) for t in present],
        "std_directions": [round(float(env_std[t, 1]), 6) for t in present],
    }
