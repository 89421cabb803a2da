"""Fraction of native contacts Q, its contact term, and the contacts two sets of structures
hold differently."""

import math

import numpy as np
import pytest
import torch

from workbench.analysis.native_contacts import (
    contact_formation,
    contact_shares,
    fraction_native_contacts,
    most_different,
)
from workbench.system import build_system


def test_hand_values():
    # two contacts along x; r0 = 4 and 6, lam = 1.5: thresholds 6 and 9 Å
    pos = torch.zeros(1, 4, 3, dtype=torch.float64)
    pos[0, 1, 0] = 7.0  # contact (0, 1) at 7 Å
    pos[0, 3, 0] = 8.0  # contact (2, 3) at 8 Å
    contacts = torch.tensor([[0, 1], [2, 3]])
    r0 = torch.tensor([4.0, 6.0], dtype=torch.float64)
    q = fraction_native_contacts(pos, contacts, r0, beta=1.0, lam=1.5)
    expected = 0.5 * (1.0 / (1.0 + math.exp(7.0 - 6.0)) + 1.0 / (1.0 + math.exp(8.0 - 9.0)))
    assert q.shape == (1,)
    assert q.item() == pytest.approx(expected, rel=1e-14)
    each = contact_formation(pos, contacts, r0)  # the two terms Q averages
    assert each.shape == (1, 2)
    assert each[0, 0].item() == pytest.approx(1.0 / (1.0 + math.exp(1.0)), rel=1e-14)
    assert each[0, 1].item() == pytest.approx(1.0 / (1.0 + math.exp(-1.0)), rel=1e-14)
    q_beta = fraction_native_contacts(pos, contacts, r0, beta=2.0, lam=1.0)
    expected = 0.5 * (1.0 / (1.0 + math.exp(2.0 * 3.0)) + 1.0 / (1.0 + math.exp(2.0 * 2.0)))
    assert q_beta.item() == pytest.approx(expected, rel=1e-14)


def _random_native(rng, n=20):
    ca = rng.standard_normal((n, 3)) * 6.0
    i, j = np.triu_indices(n, k=3)
    dist = np.linalg.norm(ca[i] - ca[j], axis=1)
    close = dist < 8.0
    return ca, np.stack([i[close], j[close]], axis=1), dist[close]


def test_native_structure_is_nearly_one():
    rng = np.random.default_rng(0)
    ca, contacts, r0 = _random_native(rng)
    native = torch.from_numpy(ca)[None]
    q = fraction_native_contacts(native, torch.from_numpy(contacts), torch.from_numpy(r0))
    # each contact sits 0.5 * r0 below its threshold: sigmoid(0.5 r0) > 0.8 for r0 > 2.8 Å
    assert q.item() > 0.9
    assert q.item() == pytest.approx(np.mean(1.0 / (1.0 + np.exp(-0.5 * r0))), rel=1e-12)


def test_matches_numpy_loop():
    rng = np.random.default_rng(1)
    ca, contacts, r0 = _random_native(rng)
    pos = ca + rng.standard_normal((6, *ca.shape)) * np.linspace(0.0, 6.0, 6)[:, None, None]
    got = fraction_native_contacts(
        torch.from_numpy(pos), torch.from_numpy(contacts), torch.from_numpy(r0), beta=1.0, lam=1.5
    ).numpy()
    expected = np.zeros(6)
    for r in range(6):
        for (a, b), dist0 in zip(contacts, r0, strict=True):
            d = np.linalg.norm(pos[r, a] - pos[r, b])
            expected[r] += 1.0 / (1.0 + np.exp(1.0 * (d - 1.5 * dist0)))
    expected /= len(contacts)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_extreme_distances_are_stable_in_float32():
    pos = torch.zeros(2, 2, 3)
    pos[0, 1, 0] = 1.0e4  # exp(+huge) would overflow
    contacts = torch.tensor([[0, 1]])
    q = fraction_native_contacts(pos, contacts, torch.tensor([5.0]), beta=10.0)
    assert q.dtype == torch.float32
    assert torch.isfinite(q).all()
    assert q[0].item() == 0.0
    assert q[1].item() == pytest.approx(1.0, abs=1e-6)


def test_no_contacts_is_an_error():
    with pytest.raises(ValueError):
        fraction_native_contacts(
            torch.zeros(1, 3, 3), torch.zeros(0, 2, dtype=torch.long), torch.zeros(0)
        )


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
