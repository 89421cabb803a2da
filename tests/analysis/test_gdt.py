import numpy as np
import pytest
import torch

from workbench.analysis import gdt_fractions, gdt_ts


def _reference(rng, n=30):
    return rng.uniform(-10.0, 10.0, size=(n, 3))


def _perturb(rng, ref, displacements):
    """Displace the residues nearest the centroid by the given lengths (random directions)."""
    model = ref.copy()
    order = np.argsort(np.linalg.norm(ref - ref.mean(0), axis=1))
    for index, length in zip(order, displacements, strict=False):
        direction = rng.standard_normal(3)
        model[index] += length * direction / np.linalg.norm(direction)
    return model


def _kabsch_fractions(model, ref, cutoffs, numpy_superpose):
    dist = np.linalg.norm(numpy_superpose(model, ref) - ref, axis=1)
    return np.array([(dist <= d).mean() for d in cutoffs])


def test_reference_and_rigid_copies_score_one(rotation):
    rng = np.random.default_rng(0)
    ref = _reference(rng)
    copies = np.stack([ref, ref @ rotation(rng) + 25.0, ref @ rotation(rng) - 7.0])
    score = gdt_ts(torch.from_numpy(copies).float(), torch.from_numpy(ref).float())
    assert score.dtype == torch.float32 and score.shape == (3,)
    torch.testing.assert_close(score, torch.ones(3))


def test_exact_fractions_default_cutoffs():
    rng = np.random.default_rng(1)
    ref = _reference(rng, n=24)
    # 3 residues 0.5 Å off (within every cutoff), 4 residues 40 Å off (outside every cutoff)
    model = _perturb(rng, ref, [0.5] * 3 + [40.0] * 4)
    p = gdt_fractions(torch.from_numpy(model)[None], torch.from_numpy(ref))
    torch.testing.assert_close(p, torch.full((1, 4), 20 / 24, dtype=torch.float64))
    assert gdt_ts(torch.from_numpy(model)[None], torch.from_numpy(ref)).item() == pytest.approx(
        20 / 24
    )


def test_exact_fractions_per_cutoff():
    # cutoffs spaced by 3 leave room for displacements that are robustly in or out:
    # an atom inside the core moved by D > 2 d cannot be brought within d while the
    # core stays within d, and one moved by D < d is within d without moving the core.
    rng = np.random.default_rng(2)
    ref = _reference(rng, n=30)
    model = _perturb(rng, ref, [0.5, 2.5, 7.5, 22.0, 80.0])
    cutoffs = (1.0, 3.0, 9.0, 27.0)
    p = gdt_fractions(torch.from_numpy(model)[None], torch.from_numpy(ref), cutoffs=cutoffs)
    expected = torch.tensor([[26, 27, 28, 29]], dtype=torch.float64) / 30
    torch.testing.assert_close(p, expected)
    ts = gdt_ts(torch.from_numpy(model)[None], torch.from_numpy(ref), cutoffs=cutoffs)
    assert ts.item() == pytest.approx((26 + 27 + 28 + 29) / 120)


def test_at_least_plain_kabsch(numpy_superpose):
    rng = np.random.default_rng(3)
    ref = _reference(rng, n=28)
    scale = rng.choice([0.3, 1.5, 4.0, 12.0], size=(8, 28, 1))
    models = ref + rng.standard_normal((8, 28, 3)) * scale
    cutoffs = (1.0, 2.0, 4.0, 8.0)
    p = gdt_fractions(torch.from_numpy(models), torch.from_numpy(ref)).numpy()
    kabsch = np.stack([_kabsch_fractions(m, ref, cutoffs, numpy_superpose) for m in models])
    assert np.all(p >= kabsch - 1e-12)
    assert np.any(p > kabsch)


def test_search_finds_the_larger_domain_of_a_hinge(numpy_superpose, rotation):
    # Residues 0..17 keep their structure; 18..29 swing as a rigid body. Plain
    # Kabsch compromises between the two; the search superposes the larger domain.
    rng = np.random.default_rng(4)
    ref = _reference(rng, n=30)
    model = ref.copy()
    hinge = ref[18]
    model[18:] = (ref[18:] - hinge) @ rotation(rng) + hinge + np.array([6.0, 0.0, 0.0])
    p = gdt_fractions(torch.from_numpy(model)[None], torch.from_numpy(ref))[0].numpy()
    kabsch = _kabsch_fractions(model, ref, (1.0, 2.0, 4.0, 8.0), numpy_superpose)
    assert p[0] >= 18 / 30
    assert p[0] > kabsch[0]


def test_batch_equals_single_and_rigid_invariance(rotation):
    rng = np.random.default_rng(5)
    ref = _reference(rng, n=20)
    models = ref + rng.standard_normal((3, 20, 3)) * rng.choice([0.5, 3.0], size=(3, 20, 1))
    batch = gdt_fractions(torch.from_numpy(models), torch.from_numpy(ref))
    for r in range(3):
        single = gdt_fractions(torch.from_numpy(models[r])[None], torch.from_numpy(ref))
        torch.testing.assert_close(batch[r], single[0])
        moved = models[r] @ rotation(rng) + rng.normal(0.0, 30.0, 3)
        torch.testing.assert_close(
            gdt_fractions(torch.from_numpy(moved)[None], torch.from_numpy(ref))[0], batch[r]
        )


def test_per_replica_reference_and_custom_windows():
    rng = np.random.default_rng(6)
    refs = rng.uniform(-8.0, 8.0, size=(3, 15, 3))
    models = refs + rng.standard_normal((3, 15, 3)) * 2.0
    shared = gdt_ts(torch.from_numpy(models), torch.from_numpy(refs), window_lengths=(3, 15))
    for r in range(3):
        single = gdt_ts(
            torch.from_numpy(models[r])[None], torch.from_numpy(refs[r]), window_lengths=(3, 15)
        )
        torch.testing.assert_close(shared[r], single[0])
    with pytest.raises(ValueError):
        gdt_ts(torch.from_numpy(models), torch.from_numpy(refs), window_lengths=(2, 16))
