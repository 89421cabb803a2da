"""Global distance test (GDT-TS) with an LGA-style search over superpositions.

For each distance cutoff ``d`` the fraction ``P_d`` of CA atoms that lie within
``d`` of their reference position is maximised over rigid superpositions. As in
LGA, the search is seeded with superpositions on contiguous windows of residues
(several window lengths, every start, and the whole chain); each seed is then
refined by re-superposing on the atoms found within ``d`` until that set stops
changing (at most ``max_iterations`` times). Every replica, cutoff and seed is one
entry of a batch: the only Python loops are over window lengths (building the
seeds) and refinement steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from workbench.analysis.superpose import rotation_from_covariance

#: Fewest atoms a refinement set may hold; smaller sets keep the previous set.
_MIN_FIT = 3


def _default_window_lengths(n: int) -> list[int]:
    """Window lengths 3, 5, 7, 10, 15, 22, ... (growing by half) below ``n``, then ``n``."""
    lengths = []
    length = _MIN_FIT
    while length < n:
        lengths.append(length)
        length += max(2, length // 2)
    lengths.append(n)
    return lengths


def _seed_masks(n: int, window_lengths: Sequence[int], device: torch.device) -> torch.Tensor:
    """Boolean masks ``[S, n]`` of every contiguous window of each length."""
    index = torch.arange(n, device=device)
    masks = []
    for length in sorted(set(window_lengths)):
        if not 1 <= length <= n:
            raise ValueError(f"window length {length} is outside [1, {n}]")
        starts = torch.arange(n - length + 1, device=device)[:, None]
        masks.append((index >= starts) & (index < starts + length))
    return torch.cat(masks)


def gdt_fractions(
    ca_pos: torch.Tensor,
    ref: torch.Tensor,
    cutoffs: Sequence[float] = (1.0, 2.0, 4.0, 8.0),
    window_lengths: Sequence[int] | None = None,
    max_iterations: int = 10,
) -> torch.Tensor:
    """Largest fraction of CA atoms within each cutoff over the searched superpositions.

    Parameters
    ----------
    ca_pos : torch.Tensor, shape (R, n, 3) (any leading axes), float
        CA coordinates, Å.
    ref : torch.Tensor, shape (n, 3) or (R, n, 3), float
        Reference CA coordinates, Å.
    cutoffs : sequence of float, length K, default (1, 2, 4, 8)
        Distance cutoffs ``d``, Å; an atom counts when its distance is ``<= d``.
    window_lengths : sequence of int, optional
        Lengths of the contiguous seed windows. Default: 3, 5, 7, 10, 15, 22, ...
        (each half again as long as the previous) below ``n``, and ``n`` itself.
        Including ``n`` makes the result at least the fraction obtained with the
        plain superposition on all atoms.
    max_iterations : int, default 10
        Most refinement steps per seed after the seed superposition.

    Returns
    -------
    torch.Tensor, shape (R, K), dtype of ``ca_pos``
        ``P_d`` for each replica and cutoff. Computed in float64.
    """
    x = ca_pos.to(torch.float64)
    y = ref.to(device=x.device, dtype=torch.float64).expand_as(x)
    lead, n = x.shape[:-2], x.shape[-2]
    x = x.reshape(-1, n, 3)
    y = y.reshape(-1, n, 3)
    x = x - x.mean(dim=1, keepdim=True)
    y = y - y.mean(dim=1, keepdim=True)
    batch = x.shape[0]
    if window_lengths is None:
        window_lengths = _default_window_lengths(n)
    seeds = _seed_masks(n, window_lengths, x.device)
    cut_sq = torch.tensor(cutoffs, dtype=torch.float64, device=x.device).square()
    n_cut, n_seed = cut_sq.shape[0], seeds.shape[0]

    # Squared distance of atom i after the superposition (rotation U, shift t) of
    # one entry: |x_i U + t - y_i|^2 = |x_i|^2 + |y_i|^2 + coef . feat_i, where
    # feat_i = (x_i, y_i, x_i y_i^T, 1) holds the per-atom terms and
    # coef = (2 U t, -2 t, -2 U, |t|^2) the per-entry ones. The weighted sums of the
    # fit are weights @ feat too, so no (entry, atom, xyz) tensor is ever formed.
    feat = torch.cat(
        [x, y, (x[:, :, :, None] * y[:, :, None, :]).flatten(-2), x.new_ones(batch, n, 1)],
        dim=-1,
    )
    norms = (x.square().sum(-1) + y.square().sum(-1))[:, None, :]

    def moments(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Centroids (B, M, 3) and covariances (B, M, 3, 3) of the fits on masks (B, M, n)."""
        sums = mask.to(torch.float64) @ feat
        count = sums[..., -1:]
        x_center = sums[..., 0:3] / count
        y_center = sums[..., 3:6] / count
        covariance = sums[..., 6:15].unflatten(-1, (3, 3)) - count[..., None] * (
            x_center[..., :, None] * y_center[..., None, :]
        )
        return x_center, y_center, covariance

    def within_cutoffs(
        x_center: torch.Tensor, y_center: torch.Tensor, rot: torch.Tensor
    ) -> torch.Tensor:
        """Atoms within the cutoff after each superposition.

        The superpositions are (B, M) with ``M = S`` (one per seed, tested against
        every cutoff) or ``M = K * S`` (cutoff-major); the result is (B, K * S, n).
        """
        shift = y_center - (x_center[..., None, :] @ rot)[..., 0, :]
        coef = torch.cat(
            [
                2.0 * (rot @ shift[..., None])[..., 0],
                -2.0 * shift,
                -2.0 * rot.flatten(-2),
                shift.square().sum(-1, keepdim=True),
            ],
            dim=-1,
        )
        dist_sq = torch.baddbmm(norms, coef, feat.transpose(1, 2))
        return (dist_sq.unflatten(1, (-1, n_seed)) <= cut_sq[:, None, None]).flatten(1, 2)

    # The seed superpositions do not depend on the cutoff: fit once, test every cutoff.
    x_center, y_center, covariance = moments(seeds.expand(batch, n_seed, n))
    rot = rotation_from_covariance(covariance)
    within = within_cutoffs(x_center, y_center, rot)
    rot = rot.repeat(1, n_cut, 1, 1)
    mask = seeds.repeat(n_cut, 1).expand(batch, -1, -1)
    count = within.sum(-1)
    best = count.unflatten(1, (n_cut, n_seed)).amax(-1)
    min_fit = min(_MIN_FIT, n)
    for _ in range(max_iterations):
        new_mask = torch.where((count >= min_fit)[..., None], within, mask)
        changed = (new_mask != mask).any(-1)
        if not changed.any():
            break
        mask = new_mask
        x_center, y_center, covariance = moments(mask)
        # Entries whose set did not change keep their rotation.
        rot[changed] = rotation_from_covariance(covariance[changed])
        within = within_cutoffs(x_center, y_center, rot)
        count = within.sum(-1)
        best = torch.maximum(best, count.unflatten(1, (n_cut, n_seed)).amax(-1))
    return (best.to(torch.float64) / n).reshape(*lead, n_cut).to(ca_pos.dtype)


def gdt_ts(
    ca_pos: torch.Tensor,
    ref: torch.Tensor,
    cutoffs: Sequence[float] = (1.0, 2.0, 4.0, 8.0),
    window_lengths: Sequence[int] | None = None,
    max_iterations: int = 10,
) -> torch.Tensor:
    """GDT-TS: the mean of :func:`gdt_fractions` over the cutoffs.

    Parameters
    ----------
    ca_pos : torch.Tensor, shape (R, n, 3) (any leading axes), float
        CA coordinates, Å.
    ref : torch.Tensor, shape (n, 3) or (R, n, 3), float
        Reference CA coordinates, Å.
    cutoffs, window_lengths, max_iterations
        As in :func:`gdt_fractions`; the default cutoffs give
        ``(P1 + P2 + P4 + P8) / 4``.

    Returns
    -------
    torch.Tensor, shape (R,), dtype of ``ca_pos``
        Score in [0, 1]; 1 for a structure identical to the reference.
    """
    return gdt_fractions(ca_pos, ref, cutoffs, window_lengths, max_iterations).mean(dim=-1)
