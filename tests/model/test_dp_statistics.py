"""Descriptor input statistics of a Deep Potential (workbench.model.dp_statistics): deepmd-kit's
values, what they do to the embedding input, refusals."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import needs_deepmd

from workbench.model.deep_potential import CGDeepPotential, DeepPotentialConfig, smooth_switch
from workbench.model.dp_statistics import (
    DEFAULT_STD,
    environment_statistics,
    set_environment_statistics,
)

TYPES = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 0])
SEL = [4, 3, 3, 0]  # fewer slots than neighbours: deepmd-kit's list drops the farthest


def _network(sel=SEL) -> CGDeepPotential:
    return CGDeepPotential(DeepPotentialConfig(
        embedding_size=4, cutoff=6.0, cutoff_smooth=3.0, embedding_widths=[4, 8],
        axis_neurons=2, fitting_widths=[8], sel=sel,
        num_neighbors=float(sum(sel)) if sel else 32.0))


def _frames(count=3, box=9.0, seed=0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(count, TYPES.numel(), 3, generator=generator, dtype=torch.float64) * box


@needs_deepmd
def test_the_statistics_are_deepmd_kits():
    from deepmd.dpmodel.descriptor.se_e2_a import DescrptSeA
    from deepmd.dpmodel.utils.env_mat_stat import EnvMatStatSe

    pos = _frames()
    env_mean, env_std = environment_statistics(_network(), pos, TYPES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stat = EnvMatStatSe(DescrptSeA(rcut=6.0, rcut_smth=3.0, sel=SEL, neuron=[4, 8],
                                       axis_neuron=2))
        stat.compute_stats([{"coord": pos.reshape(pos.shape[0], -1).numpy(),
                             "atype": TYPES[None].repeat(pos.shape[0], 1).numpy(),
                             "box": None}])
        mean, std = stat()  # (T, Σ sel, 4), the same row for every slot
    torch.testing.assert_close(env_mean, torch.from_numpy(mean[:, 0]), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(env_std, torch.from_numpy(std[:, 0]), rtol=1e-12, atol=1e-15)


def _slot_inputs(pos: torch.Tensor) -> dict[int, list[float]]:
    """``s`` of every slot of every centre, by centre type, brute force as deepmd-kit's list
    builder: of the ``Σ SEL`` nearest neighbours within the cutoff, each type's nearest
    ``SEL[type]``; the empty slots 0."""
    by_type: dict[int, list[float]] = {}
    for frame in pos:
        r = torch.cdist(frame, frame)
        for i in range(frame.shape[0]):
            near = sorted((float(r[i, j]), int(TYPES[j])) for j in range(frame.shape[0])
                          if j != i and r[i, j] < 6.0)[:sum(SEL)]
            values = []
            for kind, slots in enumerate(SEL):
                kept = [d for d, t in near if t == kind][:slots]
                s = smooth_switch(torch.tensor(kept, dtype=torch.float64), 3.0, 6.0) \
                    / torch.tensor(kept, dtype=torch.float64)
                values += s.tolist() + [0.0] * (slots - len(kept))
            by_type.setdefault(int(TYPES[i]), []).extend(values)
    return by_type


def test_the_embedding_input_over_all_slots_has_zero_mean_and_unit_deviation():
    pos = _frames(seed=1)
    network = _network()
    record = set_environment_statistics(network, pos, TYPES)
    assert record["frames"] == 3 and record["types"] == [0, 1, 2]
    for kind, values in _slot_inputs(pos).items():
        s = torch.tensor(values, dtype=torch.float64)
        x = network.embedding_input(s.float(), torch.full_like(s, kind, dtype=torch.long))
        assert abs(float(x.double().mean())) < 1e-5
        assert float(x.double().std(unbiased=False)) == pytest.approx(1.0, rel=1e-5)
    # a type with no centre keeps a zero mean and deepmd-kit's default deviation
    assert float(network.env_mean[3].abs().max()) == 0.0
    assert torch.equal(network.env_std[3], torch.full((4,), DEFAULT_STD))


def test_statistics_need_slots_and_frames_of_the_system():
    with pytest.raises(ValueError, match="need neighbour slots"):
        environment_statistics(_network(sel=None), _frames(), TYPES)
    with pytest.raises(ValueError, match=r"positions must be \(frames, 12, 3\), got \(12, 3\)"):
        environment_statistics(_network(), _frames()[0], TYPES)
