import numpy as np
import pytest
import torch

from workbench.system import build_system
from workbench.system.contacts import native_contacts
from workbench.system.pdb import read_pdb

FILES = {"cln025": "5awl", "2jof": "2jof", "1yrf": "1yrf", "1enh": "1enh", "2a3d": "2a3d"}


def _brute_force(path):
    """Native contacts from a deliberately naive reading of the file."""
    residues: dict[tuple, list] = {}
    for line in path.read_text().splitlines():
        if line.startswith("ENDMDL"):
            break
        if not line.startswith("ATOM") or line[16] not in " A":
            continue
        element = line[76:78].strip() or line[12:16].strip()[0]
        if element == "H":
            continue
        key = (line[21], int(line[22:26]), line[26])
        residues.setdefault(key, []).append(
            (line[12:16].strip(), [float(line[c : c + 8]) for c in (30, 38, 46)])
        )
    atoms = [np.array([xyz for _, xyz in r]) for r in residues.values()]
    ca = np.array([next(xyz for name, xyz in r if name == "CA") for r in residues.values()])
    contacts, distances = [], []
    for i in range(len(atoms)):
        for j in range(i + 3, len(atoms)):
            d = np.sqrt(((atoms[i][:, None, :] - atoms[j][None, :, :]) ** 2).sum(-1))
            if d.min() < 4.5:
                contacts.append([i, j])
                distances.append(np.linalg.norm(ca[i] - ca[j]))
    return contacts, np.array(distances)


@pytest.mark.parametrize("name", sorted(FILES))
def test_native_contacts_match_brute_force(name, data_dir):
    system = build_system(name)
    contacts, distances = _brute_force(data_dir / f"{FILES[name]}.pdb")
    assert system.native_contacts.dtype == torch.int64
    assert system.native_contact_distances.dtype == torch.float32
    assert system.native_contacts.tolist() == contacts
    np.testing.assert_allclose(system.native_contact_distances.numpy(), distances, rtol=1e-6)
    assert len(contacts) > 5


def test_contacts_use_side_chains(data_dir):
    structure = read_pdb(data_dir / "5awl.pdb")
    with_side_chains, _ = native_contacts(structure)
    backbone_only, _ = native_contacts(structure, cutoff=0.0)
    assert backbone_only.shape == (0, 2)
    # Trp9 packs on Tyr2 in chignolin: a side-chain contact (j - i = 7)
    assert [1, 8] in with_side_chains.tolist()


def test_ca_and_five_bead_share_contacts():
    five, ca = build_system("1enh"), build_system("1enh", mapping="ca")
    assert torch.equal(five.native_contacts, ca.native_contacts)


def test_contacts_across_chains_ignore_sequence_separation(pdb):
    lines = pdb.peptide(["ALA", "ALA"], chain="A")
    lines += pdb.peptide(["ALA", "ALA"], chain="B", shift=(0.0, 0.0, 4.0))
    contacts, distances = native_contacts(read_pdb(pdb.write(lines)))
    assert contacts.tolist() == [[0, 2], [0, 3], [1, 2], [1, 3]]
    assert distances[0].item() == pytest.approx(4.0)
