"""Reporters: per-replica metrics CSV, trajectories readable by mdtraj, appending
when a run is resumed, and output-folder checks."""

from __future__ import annotations

import csv

import pytest
import torch
from helpers import prior_potential, tiny_system

from workbench.md import LangevinIntegrator, Simulation
from workbench.md.reporters import (
    METRIC_COLUMNS,
    MetricsReporter,
    TrajectoryReporter,
    ensure_writable_folder,
)

md = pytest.importorskip("mdtraj")


def make_sim(replicas=2, temps=(300.0, 350.0)):
    return Simulation(tiny_system(), prior_potential(), LangevinIntegrator(0.004, 1.0, list(temps)),
                      replicas=replicas, seed=0)


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_metrics_rows_per_replica(tmp_path):
    sim = make_sim()
    reporter = MetricsReporter(tmp_path / "m.csv", interval=3)
    sim.reporters.append(reporter)
    sim.step(7)
    reporter.close()
    with open(tmp_path / "m.csv") as handle:
        assert handle.readline().strip() == ",".join(METRIC_COLUMNS)
    rows = read_rows(tmp_path / "m.csv")
    assert [(int(r["step"]), int(r["replica"])) for r in rows] == [(3, 0), (3, 1), (6, 0), (6, 1)]
    assert [float(r["temperature_set"]) for r in rows] == [300.0, 350.0] * 2
    last = sim.metrics()
    assert float(rows[-1]["time_ps"]) == pytest.approx(6 * 0.004)
    assert all(r["frozen"] == "0" for r in rows)
    assert reporter.last["q"].shape == (2,)
    assert float(rows[0]["rmsd"]) > 0 and float(last["q"][0]) > 0.5


def test_metrics_append_keeps_earlier_rows(tmp_path):
    path = tmp_path / "m.csv"
    sim = make_sim()
    first = MetricsReporter(path, interval=2)
    sim.reporters.append(first)
    sim.step(4)
    first.close()
    sim.reporters = [second := MetricsReporter(path, interval=2, append=True)]
    sim.step(4)
    second.close()
    rows = read_rows(path)
    assert [int(r["step"]) for r in rows] == [2, 2, 4, 4, 6, 6, 8, 8]
    assert path.read_text().count("step,") == 1  # one header


def test_metrics_interval_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="report interval must be positive"):
        MetricsReporter(tmp_path / "m.csv", interval=0)


@pytest.mark.parametrize("fmt", ["dcd", "xtc"])
def test_trajectory_frames_match_positions_and_append(tmp_path, fmt):
    sim = make_sim()
    folder = tmp_path / "traj"
    reporter = TrajectoryReporter(folder, sim.system, 2, interval=2, fmt=fmt)
    sim.reporters.append(reporter)
    expected = []
    for _ in range(2):
        sim.step(2)
        expected.append(sim.positions.clone())
    reporter.close()
    # resume: the earlier frames stay, new ones follow
    sim.reporters = [again := TrajectoryReporter(folder, sim.system, 2, 2, fmt, append=True)]
    sim.step(2)
    expected.append(sim.positions.clone())
    again.close()
    tolerance = 1e-4 if fmt == "dcd" else 2e-2  # xtc stores 0.001 nm
    for r in range(2):
        traj = md.load(str(folder / f"replica_{r:03d}.{fmt}"), top=str(folder / "topology.pdb"))
        assert traj.n_frames == 3 and traj.n_atoms == 49
        xyz = torch.from_numpy(traj.xyz * 10.0)  # nm -> Å
        for frame, pos in zip(xyz, expected, strict=True):
            torch.testing.assert_close(frame, pos[r], rtol=0, atol=tolerance)


def test_topology_pdb_describes_the_beads(tmp_path):
    sim = make_sim()
    TrajectoryReporter(tmp_path, sim.system, 2, 1).close()
    top = md.load(str(tmp_path / "topology.pdb")).topology
    assert top.n_atoms == 49 and top.n_residues == 10
    assert [a.name for a in top.atoms][:5] == list(sim.system.bead_names[:5])
    assert top.n_bonds == len(sim.system.bonds)


def test_unknown_trajectory_format(tmp_path):
    with pytest.raises(ValueError, match="trajectory format must be one of"):
        TrajectoryReporter(tmp_path, tiny_system(), 1, 1, fmt="pdb")


def test_unwritable_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match="is not writable"):
        ensure_writable_folder(blocker / "out")
    assert ensure_writable_folder(tmp_path / "a" / "b").is_dir()
