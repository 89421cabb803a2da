"""benchmarks/report.py: the latest record per GPU, configuration, model, protein and replica
count, rendered with its date and the command that made it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# benchmarks/ is a folder of scripts, not a package: load the script by its path
_spec = importlib.util.spec_from_file_location(
    "benchmarks_report", ROOT / "benchmarks" / "report.py")
report = sys.modules.setdefault("benchmarks_report", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(report)


def record(protein, label, rate, replicas=64, precision="fp32", **extra):
    return {"protein": protein, "beads": 269, "replicas": replicas, "label": label,
            "model": "demo", "options": {"mlp_precision": precision},
            "timestep_mol_per_s": rate, "ns_per_day": rate * 0.3456, "peak_memory_gb": 0.25,
            "edges_per_replica": 17050.0, **extra}


def run(name, gpu, date, command, records):
    return {"name": name, "environment": {"date": date, "gpu": gpu}, "command": command,
            "records": records}


def fixture(folder):
    h100 = "NVIDIA H100 80GB HBM3"
    runs = [
        run("sweep", h100, "2026-11-24", "workbench bench --sweep",
            [record("1enh", "tables+graph", 34000.0),
             record("1enh", "tables+graph", 38000.0, replicas=1024)]),
        # same date as the sweep, added after it: newer
        run("new", h100, "2026-11-24", "workbench bench --new",
            [record("1enh", "tables+graph", 36000.0), record("1enh", "tables+graph", 36500.0)]),
        # added last, but of an earlier date: older
        run("old", h100, "2026-11-20", "workbench bench --old",
            [record("1enh", "tables+graph", 30000.0), record("1enh", "baseline", 1800.0)]),
    ]
    (folder / "h100.json").write_text(json.dumps({"runs": runs}))
    # a lone bench.json is one run
    h200 = run("h200", "NVIDIA H200", "2026-11-22", "workbench bench --h200",
               [record("1enh", "tables+graph", 32000.0),
                record("1enh", "tables+graph-fp16", 60000.0, precision="fp16")])
    del h200["name"]
    (folder / "h200.json").write_text(json.dumps(h200))


def test_the_latest_record_of_each_kind_is_kept(tmp_path):
    fixture(tmp_path)
    kept = report.latest(report.load_records(tmp_path))
    figures = {(r["gpu"], r["label"], r["replicas"]): r["timestep_mol_per_s"] for r in kept}
    assert figures == {
        ("H100", "tables+graph", 64): 36500.0,  # newest date, then the later record
        ("H100", "baseline", 64): 1800.0,  # not measured again: the old one stays
        ("H100", "tables+graph", 1024): 38000.0,
        ("H200", "tables+graph", 64): 32000.0,
        ("H200", "tables+graph-fp16", 64): 60000.0,
    }
    # the order of the files read does not matter
    assert report.latest(list(reversed(report.load_records(tmp_path)))) == kept


def test_the_page_shows_latest_figures_targets_dates_and_commands(tmp_path):
    fixture(tmp_path)
    page = report.render(report.load_records(tmp_path))
    assert len(page.splitlines()) < 200
    assert "36,500" in page and "30,000" not in page and "34,000" not in page
    assert "| 1enh | 269 | 64 | schnet | `tables+graph` | demo | 36,500 |" in page
    assert "2026-11-24" in page and "`h100.json` run 2, new: `workbench bench --new`" in page
    assert "workbench bench --old" in page  # still the source of the baseline figure
    assert "workbench bench --sweep" in page  # the 1,024-replica figure
    assert "docs/benchmark-protocol.md" in page
    assert ("| 1ENH × 64, fastest path | H100 | ≥ 36,000 | 36,500 (`tables+graph`, 2026-11-24) "
            "| met |") in page
    # the fastest FP32 path is judged; a 16-bit figure does not meet an FP32 goal
    assert "| 1ENH × 64, fastest path | H200 | ≥ 48,000 | 32,000 (`tables+graph`, " in page
    assert ("| 1ENH × 64, reference path | H100 | ≥ 1,725 | 1,800 (`baseline`, 2026-11-20) "
            "| met |") in page


def test_each_architecture_keeps_its_own_latest_record_and_targets_read_schnet(tmp_path):
    h100 = "NVIDIA H100 80GB HBM3"
    runs = [run("schnet", h100, "2026-11-24", "workbench bench",
                [record("1enh", "tables+graph", 36500.0)]),  # no architecture: SchNet
            run("arch", h100, "2026-11-25", "workbench bench --arch egnn,painn",
                [record("1enh", "tables+graph", 90000.0, architecture="egnn"),
                 record("1enh", "tables+graph", 1000.0, architecture="painn")])]
    (tmp_path / "h100.json").write_text(json.dumps({"runs": runs}))
    kept = report.latest(report.load_records(tmp_path))
    assert {(r["architecture"], r["timestep_mol_per_s"]) for r in kept} == {
        ("schnet", 36500.0), ("egnn", 90000.0), ("painn", 1000.0)}
    page = report.render(report.load_records(tmp_path))
    assert "| 1enh | 269 | 64 | egnn | `tables+graph` | demo | 90,000 |" in page
    assert "| 1ENH × 64, fastest path | H100 | ≥ 36,000 | 36,500 (`tables+graph`, " in page


def test_each_backend_of_nequip_keeps_its_record_and_names_what_ran(tmp_path):
    h100 = "NVIDIA H100 80GB HBM3"
    backends = [("e3nn", "e3nn", 900.0), ("openequivariance", "openequivariance", 4000.0),
                ("cuequivariance", "e3nn", 880.0)]  # cuequivariance not installed: e3nn ran
    runs = [run("tp", h100, "2026-11-27",
                "workbench bench --arch nequip --tp-backend e3nn,openequivariance,cuequivariance",
                [record("1enh", "baseline", rate, architecture="nequip", tp_backend=ran,
                        tp_backend_requested=asked) for asked, ran, rate in backends]),
            run("schnet", h100, "2026-11-24", "workbench bench",
                [record("1enh", "baseline", 1800.0)])]
    (tmp_path / "h100.json").write_text(json.dumps({"runs": runs}))
    kept = report.latest(report.load_records(tmp_path))
    assert len(kept) == 4
    page = report.render(report.load_records(tmp_path))
    assert "| 1enh | 269 | 64 | nequip/e3nn | `baseline` | demo | 900 |" in page
    assert "| 1enh | 269 | 64 | nequip/openequivariance | `baseline` | demo | 4,000 |" in page
    assert ("| 1enh | 269 | 64 | nequip/e3nn (asked cuequivariance) | `baseline` | demo | 880 |"
            in page)
    # a record without a backend renders as before
    assert "| 1enh | 269 | 64 | schnet | `baseline` | demo | 1,800 |" in page


def test_the_command_writes_the_page(tmp_path):
    fixture(tmp_path)
    out = tmp_path / "BENCHMARKS.md"
    assert report.main(["--results", str(tmp_path), "--out", str(out)]) == 0
    assert out.read_text().startswith("<!-- generated by `python benchmarks/report.py`")


def bench_json(folder, gpu, command):
    folder.mkdir(parents=True)
    path = folder / "bench.json"
    path.write_text(json.dumps({"environment": {"date": "2026-11-27", "gpu": gpu},
                                "command": command, "records": [record("1enh", "all", 1.0)]}))
    return path


def test_a_bench_json_is_added_to_its_machines_file_once(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    fixture(results)
    five = bench_json(tmp_path / "five", "NVIDIA H100 80GB HBM3", "workbench bench --five")
    assert report.add_run(five, results) == results / "h100.json"
    runs = report.read_runs(results / "h100.json")
    assert [r["name"] for r in runs] == ["sweep", "new", "old", "five"]
    assert runs[-1]["command"] == "workbench bench --five"
    with pytest.raises(ValueError, match="already in"):
        report.add_run(five, results, name="again")
    other = bench_json(tmp_path / "other" / "five", "NVIDIA H100 80GB HBM3", "workbench bench")
    with pytest.raises(ValueError, match="already has a run named 'five'"):
        report.add_run(other, results)
    assert report.add_run(other, results, name="five-again") == results / "h100.json"
    assert len(report.read_runs(results / "h100.json")) == 5
    # a CPU run starts the CPU file; the page shows the added runs
    cpu = bench_json(tmp_path / "cpu-run", None, "workbench bench --device cpu")
    assert report.main(["--results", str(results), "--add", str(cpu)]) == 0
    assert report.read_runs(results / "cpu.json")[0]["name"] == "cpu-run"
    page = report.render(report.load_records(results))
    assert "`cpu.json` run 1, cpu-run: `workbench bench --device cpu`" in page
    with pytest.raises(SystemExit) as refused:
        report.main(["--results", str(results), "--add", str(cpu)])
    assert refused.value.code == 1
    with pytest.raises(ValueError, match="not the bench.json"):
        report.add_run(results / "h100.json", results)


def test_a_run_stopped_part_way_is_added_and_says_so(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    stopped = bench_json(tmp_path / "race", "NVIDIA H200", "workbench bench --race")
    payload = json.loads(stopped.read_text())
    stopped.write_text(json.dumps({**payload, "unfinished": 2}))
    report.add_run(stopped, results)
    assert report.read_runs(results / "h200.json")[0]["unfinished"] == 2
    page = report.render(report.load_records(results))
    assert ("`h200.json` run 1, race: `workbench bench --race` (stopped with 2 case(s) "
            "not run)") in page
    assert "| 1enh | 269 | 64 | schnet | `all` |" in page  # its finished case is shown


def test_the_committed_page_is_the_rendering_of_the_kept_results():
    page = report.render(report.load_records(ROOT / "benchmarks" / "results"))
    assert (ROOT / "BENCHMARKS.md").read_text() == page, "run `make benchmarks-md`"


def test_every_architecture_has_a_fused_figure_for_the_100k_bead_system():
    """The recorded results hold, for every architecture, a fused-path run of the one
    100,068-bead system (``1enh*372`` × 1) on a GPU (docs/large-systems.md)."""
    from workbench.model.architectures import ARCHITECTURES

    measured = {r.get("architecture") or "schnet"
                for r in report.load_records(ROOT / "benchmarks" / "results")
                if r["protein"] == "1enh*372" and r["replicas"] == 1
                and r.get("force_path") == "triton" and r["gpu"] not in (None, "CPU")
                and r["timestep_mol_per_s"] > 0}
    assert set(ARCHITECTURES) <= measured, sorted(set(ARCHITECTURES) - measured)


def test_a_results_file_keeps_one_record_per_line(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    fixture(results)
    five = bench_json(tmp_path / "five", "NVIDIA H100 80GB HBM3", "workbench bench --five")
    path = report.add_run(five, results)
    lines = path.read_text().splitlines()
    runs = report.read_runs(path)
    records = sum(len(run["records"]) for run in runs)
    # the opening line, one line per run (its fields) and one per record
    assert len(lines) == 1 + len(runs) + records
    assert all(json.loads(line.rstrip(",").removesuffix("]}").removesuffix("]")) ==
               record for line, record in zip(lines[2:], runs[0]["records"], strict=False))
