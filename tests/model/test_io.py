"""Saving and loading potentials: round trips, refusing foreign files, atomic writes."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch
from helpers import exact_graph, perturbed_positions, prior_potential, schnet_potential

from workbench.model import ModelFormatError, load_potential, save_potential
from workbench.model.native_priors import demo_potential
from workbench.system import build_system


def energies(potential, pos):
    graph = exact_graph(pos, potential.cutoff) if potential.schnet is not None else None
    return potential.energy_and_forces(pos, graph)


@pytest.mark.parametrize(
    "make",
    [
        lambda: schnet_potential(seed=3),
        lambda: schnet_potential(seed=4, basis="exp-normal", cutoff_lower=0.5,
                                 conv_envelope="identity", output_widths=[8, 4]),
        lambda: prior_potential(),
    ],
    ids=["schnet+priors", "exp-normal", "priors-only"],
)
def test_round_trip_gives_identical_energies(tmp_path, make):
    potential = make()
    potential.metadata = {"trained": False, "note": "round trip"}
    path = save_potential(potential, tmp_path / "model.pt")
    loaded = load_potential(path)
    assert loaded.metadata == potential.metadata
    if potential.schnet is not None:
        assert loaded.schnet.config == potential.schnet.config
    assert list(loaded.priors) == list(potential.priors)
    pos = perturbed_positions(replicas=2, sigma=0.3, seed=5, dtype=torch.float32)
    e0, f0 = energies(potential, pos)
    e1, f1 = energies(loaded, pos)
    assert torch.equal(e0, e1) and torch.equal(f0, f1)
    for key, value in potential.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_indices_are_stored_narrow_and_read_back_as_int64(tmp_path):
    potential = schnet_potential(seed=3)
    path = save_potential(potential, tmp_path / "model.pt")
    stored = torch.load(path, weights_only=True)["state_dict"]
    index_keys = [k for k, v in potential.state_dict().items() if v.dtype == torch.int64]
    assert index_keys and all(stored[k].dtype == torch.int16 for k in index_keys)
    loaded = load_potential(path)
    assert all(loaded.state_dict()[k].dtype == torch.int64 for k in index_keys)
    # files of version 2 (int32 indices) and 1 (int64) read the same
    for version, dtype in ((2, torch.int32), (1, torch.int64)):
        payload = torch.load(path, weights_only=True)
        payload["version"] = version
        payload["state_dict"] = {k: v.to(dtype) if v.dtype == torch.int16 else v
                                 for k, v in payload["state_dict"].items()}
        torch.save(payload, tmp_path / f"v{version}.pt")
        old = load_potential(tmp_path / f"v{version}.pt")
        for key, value in loaded.state_dict().items():
            assert torch.equal(old.state_dict()[key], value), key


def test_an_index_beyond_int16_is_stored_as_int32(tmp_path):
    from workbench.model.io import _loaded, _stored

    wide = torch.tensor([0, 40_000], dtype=torch.int64)
    assert _stored(wide).dtype == torch.int32
    assert _stored(torch.tensor([-5, 32_767])).dtype == torch.int16
    assert torch.equal(_loaded(_stored(wide)), wide)


def test_demo_potential_round_trip(tmp_path):
    system = build_system("cln025")
    potential = demo_potential(system, schnet_potential().schnet.config)
    loaded = load_potential(save_potential(potential, tmp_path / "demo.pt"))
    assert loaded.metadata["trained"] is False
    pos = system.native_positions[None]
    assert torch.equal(energies(potential, pos)[0], energies(loaded, pos)[0])


# -- foreign and broken files ---------------------------------------------------------
class _Sneaky:
    """Unpickling this would create a file: a weights-only loader must never run it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _write_foreign(kind: str, path, tmp_path):
    if kind == "garbage":
        path.write_bytes(os.urandom(256))
    elif kind == "text":
        path.write_text("SchNet weights, honest\n")
    elif kind == "other-dict":
        torch.save({"weights": torch.zeros(3)}, path)
    elif kind == "tensor":
        torch.save(torch.zeros(3), path)
    elif kind == "pickle-code":
        torch.save({"format": "cg-workbench-potential", "x": _Sneaky(str(tmp_path / "pwned"))},
                   path)
    elif kind == "plain-pickle":
        with open(path, "wb") as handle:
            pickle.dump({"format": "cg-workbench-potential"}, handle, protocol=2)
    elif kind == "checkpoint":
        torch.save({"format": "cg-workbench-checkpoint", "step": 3}, path)


@pytest.mark.parametrize(
    "kind",
    ["garbage", "text", "other-dict", "tensor", "pickle-code", "plain-pickle", "checkpoint"],
)
def test_non_model_files_raise_model_format_error(tmp_path, kind):
    path = tmp_path / "model.pt"
    _write_foreign(kind, path, tmp_path)
    with pytest.raises(ModelFormatError, match="model.pt"):
        load_potential(path)
    assert not (tmp_path / "pwned").exists(), "the loader executed pickled code"


def _tamper(tmp_path, change):
    path = save_potential(schnet_potential(), tmp_path / "model.pt")
    payload = torch.load(path, weights_only=True)
    change(payload)
    torch.save(payload, path)
    return path


def _drop(key):
    def change(payload):
        del payload["state_dict"][key]

    return change


def _resize(key):
    def change(payload):
        payload["state_dict"][key] = payload["state_dict"][key][:3]

    return change


def _unknown_prior(payload):
    config = json.loads(payload["config"])
    config["priors"][0]["class"] = "MysteryTerm"
    payload["config"] = json.dumps(config)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_drop("priors.bonds.k"), "do not match"),
        (_resize("priors.angles.x0"), "do not match"),
        (_resize("schnet.embedding_layer.weight"), "do not match"),
        (_drop("bead_types"), "do not match"),
        (lambda p: p.update(config="{not json"), "do not match"),
        (lambda p: p.pop("state_dict"), "do not match"),
        (_unknown_prior, "unknown prior class 'MysteryTerm'"),
    ],
    ids=["missing-prior-tensor", "prior-size", "schnet-size", "no-bead-types", "bad-json",
         "no-state-dict", "unknown-prior"],
)
def test_inconsistent_model_files_raise_model_format_error(tmp_path, change, message):
    path = _tamper(tmp_path, change)
    with pytest.raises(ModelFormatError, match=message):
        load_potential(path)


def test_missing_model_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model file"):
        load_potential(tmp_path / "absent.pt")


# -- atomic writes --------------------------------------------------------------------
def test_failed_save_leaves_existing_file_intact(tmp_path, monkeypatch):
    path = save_potential(prior_potential(), tmp_path / "model.pt")
    before = path.read_bytes()

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"half a model")  # a partial write, then the failure
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_potential(schnet_potential(), path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"], "temporary file left"
    assert load_potential(path).schnet is None


def test_save_into_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save_potential(prior_potential(), tmp_path / "nowhere" / "model.pt")
