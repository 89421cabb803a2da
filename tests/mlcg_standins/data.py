"""Stand-ins for mlcg's AtomicData (a PyG Data) and its GlobalStorage, and collation.

``collate`` follows docs/mlcg-format.md §4.3: tensors concatenated in list order, every
``index_mapping`` offset by the structure's first bead, ``mapping_batch`` set to
the structure index, a ``batch`` vector added.
"""

from __future__ import annotations

import torch


class GlobalStorage:
    """PyG's store: pickled state ``{'_mapping': fields, '_parent': owner}``."""

    def __init__(self, mapping, parent):
        self._mapping = mapping
        self._parent = parent


class AtomicData:
    """Pickled state ``{'_store': GlobalStorage}`` (a reference cycle through ``_parent``)."""

    def __init__(self, storage_cls, fields):
        self._store = storage_cls(fields, self)

    @property
    def fields(self):
        return self._store._mapping


def neighbor_group(tag, index_mapping):
    """A prior neighbor-list dict of one structure (§4.2)."""
    index_mapping = torch.as_tensor(index_mapping, dtype=torch.long).reshape(
        len(index_mapping), -1
    )
    return {
        "tag": tag,
        "order": int(index_mapping.shape[0]),
        "index_mapping": index_mapping,
        "cell_shifts": None,
        "rcut": None,
        "self_interaction": None,
        "mapping_batch": torch.zeros(index_mapping.shape[1], dtype=torch.long),
    }


def collate(configurations, dtype=torch.float64):
    """A batch dict of a list of AtomicData stand-ins."""
    fields = [c.fields for c in configurations]
    counts = [int(f["atom_types"].shape[0]) for f in fields]
    starts = [sum(counts[:i]) for i in range(len(counts))]
    neighbor_list = {}
    for key in fields[0]["neighbor_list"]:
        groups = [f["neighbor_list"][key] for f in fields]
        neighbor_list[key] = {
            "index_mapping": torch.cat(
                [g["index_mapping"] + s for g, s in zip(groups, starts, strict=True)], dim=1
            ),
            "mapping_batch": torch.cat(
                [torch.full((g["index_mapping"].shape[1],), b) for b, g in enumerate(groups)]
            ).long(),
        }
    return {
        "pos": torch.cat([f["pos"] for f in fields]).to(dtype),
        "atom_types": torch.cat([f["atom_types"] for f in fields]),
        "batch": torch.cat([torch.full((n,), b) for b, n in enumerate(counts)]).long(),
        "n_structures": len(fields),
        "neighbor_list": neighbor_list,
    }
