"""Atomic writes: the new content or the old, never half of either, no temporary file left."""

import json
import os

import pytest
import torch

from workbench.files import (
    atomic_save,
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
)


def test_text_bytes_json_and_torch_round_trip(tmp_path):
    assert atomic_write_text(tmp_path / "a.txt", "ε = 0.31\n").read_text() == "ε = 0.31\n"
    assert atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01").read_bytes() == b"\x00\x01"
    assert json.loads(atomic_write_json(tmp_path / "c.json", {"q": [0.9]}).read_text()) == {
        "q": [0.9]}
    path = atomic_save({"x": torch.arange(3)}, tmp_path / "d.pt")
    assert torch.equal(torch.load(path, weights_only=True)["x"], torch.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin", "c.json", "d.pt"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = atomic_write_text(tmp_path / "card.json", "old")

    def half_then_fail(handle):
        handle.write(b"ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, half_then_fail)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["card.json"]


def test_a_missing_folder_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        atomic_write_text(tmp_path / "nowhere" / "a.txt", "x")


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_files_take_the_users_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = atomic_write_text(tmp_path / "shared.json", "{}")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
