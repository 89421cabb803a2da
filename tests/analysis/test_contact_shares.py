"""Native contacts held differently by two sets of structures."""

import torch

from workbench.analysis.contact_shares import contact_shares, most_different
from workbench.analysis.native_contacts import fraction_native_contacts
from workbench.system import build_system


def test_shares_are_the_contact_terms_of_q_averaged_over_structures():
    system = build_system("cln025")
    native = system.native_positions[system.ca_index]
    stretched = 1.6 * native
    ca = torch.stack([native, stretched])
    shares = contact_shares(ca, system.native_contacts, system.native_contact_distances)
    assert shares.shape == (system.native_contacts.shape[0],)
    assert torch.all((shares >= 0) & (shares <= 1))
    q = fraction_native_contacts(ca, system.native_contacts, system.native_contact_distances)
    torch.testing.assert_close(shares.mean(), q.mean())
    native_only = contact_shares(native[None], system.native_contacts,
                                 system.native_contact_distances)
    assert torch.all(native_only >= shares)


def test_most_different_orders_both_ways():
    a = torch.tensor([0.9, 0.1, 0.5, 0.5])
    b = torch.tensor([0.2, 0.8, 0.5, 0.4])
    less, more = most_different(a, b, top=2)
    assert less == [1, 2] and more == [0, 3]
