"""Fraction of native contacts Q, and which native contacts two sets of structures hold
differently.

For every native contact, its share formed over a set of structures is the mean of the
smooth contact term of Q (:func:`contact_formation`) over them; two sets (say, where the
teacher's long run and a model's ended) are compared contact by contact
(:func:`contact_shares`).
"""

from __future__ import annotations

import torch


def fraction_native_contacts(
    ca_pos: torch.Tensor,
    contacts: torch.Tensor,
    r0: torch.Tensor,
    beta: float = 1.0,
    lam: float = 1.5,
) -> torch.Tensor:
    """Smooth fraction of native contacts formed (Best–Hummer–Eaton Q).

    ``Q = mean_c 1 / (1 + exp(beta * (r_c - lam * r0_c)))``, evaluated as a
    sigmoid so that large arguments neither overflow nor lose precision.

    Parameters
    ----------
    ca_pos : torch.Tensor, shape (R, n_res, 3) (any leading axes), float
        CA coordinates, Å.
    contacts : torch.Tensor, shape (C,  2), int64
        Residue pairs ``(i, j)`` of the native contacts, ``C >= 1``.
    r0 : torch.Tensor, shape (C,), float
        Native CA–CA distance of each contact, Å.
    beta : float, default 1.0
        Steepness, 1/Å (10 nm⁻¹).
    lam : float, default 1.5
        Tolerance factor on the native distance.

    Returns
    -------
    torch.Tensor, shape (R,), dtype of ``ca_pos``
        Q in [0, 1] for each replica.
    """
    if contacts.shape[0] == 0:
        raise ValueError("fraction_native_contacts needs at least one contact")
    return contact_formation(ca_pos, contacts, r0, beta, lam).mean(dim=-1)


def contact_formation(
    ca_pos: torch.Tensor,
    contacts: torch.Tensor,
    r0: torch.Tensor,
    beta: float = 1.0,
    lam: float = 1.5,
) -> torch.Tensor:
    """How formed each native contact is: the terms whose mean is
    :func:`fraction_native_contacts` (same parameters).

    Returns
    -------
    torch.Tensor, shape (R, C) (the leading axes of ``ca_pos``), dtype of ``ca_pos``
        ``1 / (1 + exp(beta * (r_c - lam * r0_c)))`` in [0, 1].
    """
    contacts = contacts.to(ca_pos.device)
    r0 = r0.to(device=ca_pos.device, dtype=ca_pos.dtype)
    diff = ca_pos[..., contacts[:, 0], :] - ca_pos[..., contacts[:, 1], :]
    r = torch.linalg.vector_norm(diff, dim=-1)
    return torch.sigmoid(beta * (lam * r0 - r))


def contact_shares(ca_pos: torch.Tensor, contacts: torch.Tensor, r0: torch.Tensor) -> torch.Tensor:
    """Share formed of each native contact over a set of structures.

    Parameters
    ----------
    ca_pos : torch.Tensor, shape (R, n_residues, 3)
        CA positions of R structures, Å.
    contacts : torch.Tensor, shape (C, 2), int
        Residue pairs of the native contacts.
    r0 : torch.Tensor, shape (C,)
        Their native CA–CA distances, Å.

    Returns
    -------
    torch.Tensor, shape (C,)
        Mean over the structures of each contact's formation, in [0, 1].
    """
    return contact_formation(ca_pos, contacts, r0).mean(0)


def most_different(
    shares_a: torch.Tensor, shares_b: torch.Tensor, top: int
) -> tuple[list[int], list[int]]:
    """The contacts formed less in set A than in set B, and those formed more.

    Parameters
    ----------
    shares_a, shares_b : torch.Tensor, shape (C,)
        :func:`contact_shares` of the two sets.
    top : int
        Contacts listed each way.

    Returns
    -------
    (list of int, list of int)
        Contact indices, largest difference first: formed less in A, formed more in A.
    """
    order = (shares_a - shares_b).argsort()
    return order[:top].tolist(), order.flip(0)[:top].tolist()
