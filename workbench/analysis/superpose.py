"""Optimal rigid superposition (Kabsch), batched over any leading axes, and the RMSD after it.

The fit is done in float64 whatever the input dtype; results come back in the
dtype of ``mobile``. Only proper rotations (determinant +1) are returned: a
mirror image is never superposed by a reflection.
"""

from __future__ import annotations

import torch


def rotation_from_covariance(covariance: torch.Tensor) -> torch.Tensor:
    """Proper rotation maximising ``trace(rotation.T @ covariance)``.

    Parameters
    ----------
    covariance : torch.Tensor, shape (..., 3, 3), float
        Cross-covariance ``sum_i w_i x_i^T y_i`` of centred mobile rows ``x_i``
        and centred reference rows ``y_i``.

    Returns
    -------
    torch.Tensor, shape (..., 3, 3), same dtype as ``covariance``
        Rotation ``U`` with ``det U = +1`` such that ``x @ U`` best matches ``y``
        in the weighted least-squares sense.
    """
    u, _, vh = torch.linalg.svd(covariance)
    det = torch.linalg.det(u @ vh)
    flip = torch.ones_like(u[..., 0, :])
    flip[..., 2] = torch.where(det < 0, -1.0, 1.0)
    return (u * flip[..., None, :]) @ vh


def _fit(
    mobile: torch.Tensor, ref: torch.Tensor, weights: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Float64 rotation and the two weighted centroids (each of shape (..., 1, 3))."""
    x = mobile.to(torch.float64)
    y = ref.to(device=x.device, dtype=torch.float64)
    if weights is None:
        w = torch.ones(x.shape[:-1], dtype=torch.float64, device=x.device)
    else:
        w = weights.to(device=x.device, dtype=torch.float64)
    w = w[..., None]
    w_sum = w.sum(dim=-2, keepdim=True)
    x_center = (w * x).sum(dim=-2, keepdim=True) / w_sum
    y_center = (w * y).sum(dim=-2, keepdim=True) / w_sum
    covariance = ((x - x_center) * w).transpose(-1, -2) @ (y - y_center)
    return rotation_from_covariance(covariance), x_center, y_center


def kabsch_rotation(
    mobile: torch.Tensor, ref: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Rotation of the optimal weighted rigid superposition of ``mobile`` onto ``ref``.

    Parameters
    ----------
    mobile : torch.Tensor, shape (R, n, 3) (any leading axes), float
        Coordinates to move.
    ref : torch.Tensor, shape (n, 3) or (R, n, 3), float
        Target coordinates; broadcast against ``mobile``.
    weights : torch.Tensor, shape (n,) or (R, n), float or bool, optional
        Non-negative per-point weights of the fit (a boolean mask selects the
        points to fit on). Uniform when omitted.

    Returns
    -------
    torch.Tensor, shape (R, 3, 3), dtype of ``mobile``
        Proper rotation ``U`` (``det U = +1``): the superposed coordinates are
        ``(mobile - c_mobile) @ U + c_ref`` with ``c`` the weighted centroids.
    """
    rotation, _, _ = _fit(mobile, ref, weights)
    return rotation.to(mobile.dtype)


def superpose(
    mobile: torch.Tensor, ref: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Move ``mobile`` onto ``ref`` by the optimal weighted rigid superposition.

    Parameters
    ----------
    mobile : torch.Tensor, shape (R, n, 3) (any leading axes), float
        Coordinates to move.
    ref : torch.Tensor, shape (n, 3) or (R, n, 3), float
        Target coordinates; broadcast against ``mobile``.
    weights : torch.Tensor, shape (n,) or (R, n), float or bool, optional
        Non-negative per-point weights of the fit. All points are moved, whatever
        their weight. Uniform when omitted.

    Returns
    -------
    torch.Tensor, shape (R, n, 3), dtype of ``mobile``
        The rotated and translated copy of ``mobile``.
    """
    rotation, x_center, y_center = _fit(mobile, ref, weights)
    moved = (mobile.to(torch.float64) - x_center) @ rotation + y_center
    return moved.to(mobile.dtype)


def rmsd(pos: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """RMSD of each replica from a reference after optimal superposition.

    Parameters
    ----------
    pos : torch.Tensor, shape (R, n, 3) (any leading axes), float
        Coordinates, Å (in practice the CA beads).
    ref : torch.Tensor, shape (n, 3) or (R, n, 3), float
        Reference coordinates, Å.

    Returns
    -------
    torch.Tensor, shape (R,), dtype of ``pos``
        Minimum RMSD over proper rigid motions, Å. Computed in float64.
    """
    ref64 = ref.to(device=pos.device, dtype=torch.float64)
    moved = superpose(pos.to(torch.float64), ref64)
    msd = (moved - ref64).square().sum(dim=-1).mean(dim=-1)
    return msd.sqrt().to(pos.dtype)
