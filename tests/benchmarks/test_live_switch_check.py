"""benchmarks/live_switch_check.py's backend mode on the CPU: the shipped NequIP model runs
headless under the controller, the switch is sent as the Kernels panel's selector sends it,
and the record and its redrawn plot say what happened (here a refusal: cuEquivariance needs
a CUDA device, so the run keeps e3nn and the refusal is no phase boundary)."""

import json

import pytest

pytest.importorskip("e3nn")
pytest.importorskip("plotly")

from benchmarks import live_switch_check  # noqa: E402


def test_a_backend_switch_is_recorded_with_its_refusal_and_drawn(tmp_path):
    out, html = tmp_path / "switch.json", tmp_path / "switch.html"
    live_switch_check.record([str(out), "cln025", "1", "1", "cpu"], ["e3nn", "cuequivariance"])
    record = json.loads(out.read_text())
    assert record["phases"] == ["e3nn", "cuequivariance"] and record["error"] is None
    first, refused = record["events"][0], record["events"][-1]
    assert first["backend"] == "e3nn" and first["step"] == 0
    assert refused["backend"] == "e3nn" and "'cuequivariance' refused" in refused["message"]
    assert len(record["median_timestep_mol_per_s"]) == 1  # one phase: the run kept e3nn
    assert record["median_timestep_mol_per_s"][0] > 0
    live_switch_check.plot([str(out), str(html)])
    assert "in a running simulation" in html.read_text()
