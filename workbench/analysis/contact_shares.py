"""Which native contacts two sets of structures hold differently.

For every native contact, its share formed over a set of structures is the mean of the
smooth contact term of Q (:func:`workbench.analysis.native_contacts.contact_formation`)
over them; two sets (say, where the teacher's long run and a model's ended) are compared
contact by contact.
"""

from __future__ import annotations

import torch

from workbench.analysis.native_contacts import contact_formation


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
