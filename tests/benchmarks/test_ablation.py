"""benchmarks/ablation.py and its sequence (workbench.model.ablation) on the CPU: the order of
the rows, the table and the chart from synthetic record files, the documentation section, and
the GPU loop with a stand-in for the timing (no benchmark runs here)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from benchmarks import ablation
from workbench.model.ablation import (
    CUMULATIVE,
    PAPER_TECHNIQUES,
    WALK,
    ablation_configs,
    ablation_steps,
    walk_stages,
)
from workbench.model.options import ALL_FUSED, KernelOptions

ENV = {"date": "2026-11-27", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11", "triton": "3.6",
       "python": "3.12"}


def record(protein, config, rate, replicas=64, model="demo", label=None):
    return {"protein": protein, "beads": 10, "replicas": replicas, "label": label or config,
            "model": model, "options": KernelOptions.parse(config).to_dict(),
            "timestep_mol_per_s": rate, "ns_per_day": rate * 0.35, "peak_memory_gb": None,
            "edges_per_replica": None, "force_path": "triton", "threads": None}


def payload(records, command="workbench bench --configs baseline", env=ENV):
    return {"environment": env, "command": command, "records": records}


def rows_by(steps, group):
    return [s for s in steps if s.group == group]


# -- the sequence ----------------------------------------------------------------------
def test_the_sequence_starts_with_the_baseline_then_each_technique_alone():
    steps = ablation_steps()
    assert steps[0].config == "baseline" and steps[0].options.is_baseline
    alone = rows_by(steps, "alone")
    assert [s.config for s in alone] == list(PAPER_TECHNIQUES)
    for step in alone:
        assert step.options.enabled() == [step.config]


@pytest.mark.parametrize(("group", "precision", "last"),
                         [("cumulative, FP32", "fp32", "all"),
                          ("cumulative, FP16", "fp16", "all-fp16")])
def test_cumulative_rows_add_one_technique_each_and_end_in_all(group, precision, last):
    rows = rows_by(ablation_steps(), group)
    assert CUMULATIVE[:4] == PAPER_TECHNIQUES and set(CUMULATIVE) == set(ALL_FUSED)
    assert len(rows) == len(CUMULATIVE)
    previous = KernelOptions(mlp_precision=precision)
    for name, row in zip(CUMULATIVE, rows, strict=True):
        options = row.options
        assert options.mlp_precision == precision
        added = set(options.enabled()) - set(previous.enabled())
        assert added == {name} and set(previous.enabled()) <= set(options.enabled())
        previous = options
    assert rows[-1].config == last and rows[-1].options == KernelOptions.parse(last)
    assert rows[0].step == "fused_radial_basis" and rows[1].step == "+fused_message_passing"


def test_captured_steps_then_the_engines_own_additions_last():
    steps = ablation_steps()
    assert [s.config for s in rows_by(steps, "captured steps")] == ["all+graph",
                                                                    "all+graph-fp16"]
    assert [s.config for s in steps[-2:]] == ["all+tables", "tables+graph"]
    assert [s.paper for s in steps] == [True] * (len(steps) - 2) + [False, False]
    assert [s.group for s in steps][-1] == "beyond the paper"


def test_each_configuration_is_measured_once_and_parses():
    configs = ablation_configs()
    assert len(configs) == len(set(configs)) == len(ablation_steps()) - 1  # frb twice
    assert configs[0] == "baseline" and "fused_radial_basis-fp16" in configs
    for config in configs:
        KernelOptions.parse(config)


def test_the_walk_follows_the_cumulative_rows():
    stages = walk_stages()
    assert len(stages) == len(WALK) + 1
    fp32 = [KernelOptions.baseline()] + [s.options for s in
                                         rows_by(ablation_steps(), "cumulative, FP32")]
    assert [options for _, options in stages[: len(fp32)]] == fp32
    assert stages[len(fp32)][1] == KernelOptions.parse("all-fp16")
    assert stages[len(fp32) + 1][1] == KernelOptions.parse("all+graph-fp16")


# -- table and chart -------------------------------------------------------------------
@pytest.fixture
def files(tmp_path):
    first = payload([
        record("1enh", "baseline", 1000.0),
        record("1enh", "fused_radial_basis", 800.0),
        record("1enh", "all", 500.0, label="+".join(ALL_FUSED)),  # matched by its options
        record("1enh", "tables+graph", 20000.0),
        record("1enh", "tables+graph", 1.0, replicas=8),  # another replica count
        record("1enh", "tables+graph", 2.0, model="shipped"),  # another model
        record("cln025", "baseline", 4000.0),
        record("cln025", "all-fp16", 10000.0),
    ], command="python -m benchmarks.ablation --proteins 1enh,cln025")
    second = payload([record("cln025", "all+tables", 30000.0),  # no baseline in this run
                      record("1enh", "tables+graph", 25000.0)])  # the later one counts
    paths = []
    for name, data in (("first.json", first), ("second.json", second)):
        path = tmp_path / name
        path.write_text(json.dumps(data))
        paths.append(path)
    return paths


def cells(table):
    return {row.config: {p: c for p, c in row.cells.items()} for row in table.rows}


def test_rows_follow_the_sequence_with_ratios_to_the_same_runs_baseline(files):
    table = ablation.collect(ablation.load(files[:1]))
    assert [r.config for r in table.rows] == [s.config for s in ablation_steps()]
    got = cells(table)
    assert got["fused_radial_basis"]["1enh"].ratio == pytest.approx(0.8)
    assert got["all"]["1enh"].rate == 500.0 and got["all"]["1enh"].ratio == pytest.approx(0.5)
    assert got["all-fp16"]["cln025"].ratio == pytest.approx(2.5)
    assert got["tables+graph"]["1enh"].rate == 20000.0  # not the 8-replica or shipped one
    assert got["csr_aggregation"] == {} and "2a3d" not in got["baseline"]


def test_a_later_file_replaces_a_record_and_a_run_without_baseline_has_no_ratio(files):
    got = cells(ablation.collect(ablation.load(files)))
    assert got["tables+graph"]["1enh"].rate == 25000.0
    assert got["tables+graph"]["1enh"].ratio is None
    assert got["all+tables"]["cln025"].ratio is None


def test_markdown_table_cells_and_dashes(files):
    text = ablation.markdown(ablation.collect(ablation.load(files[:1])))
    assert "GPU: NVIDIA H100 80GB HBM3" in text
    assert "Command: `python -m benchmarks.ablation --proteins 1enh,cln025`" in text
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0] == "| group | step | CLN025 | 2JOF | 1YRF | 1ENH | 2A3D |"
    assert lines[1] == "| baseline | `baseline` | 4,000 (1.00×) | – | – | 1,000 (1.00×) | – |"
    assert lines[2] == "| alone | `fused_radial_basis` | – | – | – | 800 (0.80×) | – |"
    assert "| +pair_filter (= all) | – | – | – | 500 (0.50×) | – |" in text
    assert "| *beyond the paper* | `all+tables` | – | – | – | – | – |" in text
    assert len(lines) == 1 + len(ablation_steps())  # the separator row starts with "|-"
    both = ablation.markdown(ablation.collect(ablation.load(files)))
    assert "30,000 (–)" in both and "records `second.json`" in both


def test_runs_in_files_of_one_name_keep_their_own_baselines(tmp_path):
    paths = []
    for protein, base in (("1enh", 1000.0), ("2a3d", 500.0)):
        folder = tmp_path / protein
        folder.mkdir()
        (folder / "bench.json").write_text(json.dumps(payload(
            [record(protein, "baseline", base), record(protein, "all", 2000.0)])))
        paths.append(folder / "bench.json")
    got = cells(ablation.collect(ablation.load(paths)))
    assert got["all"]["1enh"].ratio == pytest.approx(2.0)
    assert got["all"]["2a3d"].ratio == pytest.approx(4.0)


def test_files_of_different_gpus_are_refused(files, tmp_path):
    other = tmp_path / "h200.json"
    other.write_text(json.dumps(payload([record("1enh", "baseline", 1.0)],
                                        env={**ENV, "gpu": "NVIDIA H200"})))
    with pytest.raises(ValueError, match="different GPUs"):
        ablation.collect(ablation.load([files[0], other]))


def test_a_record_with_an_unknown_technique_on_is_left_out():
    unknown = {**record("1enh", "baseline", 5.0), "options": {"warp_magic": True}}
    assert ablation.record_options(unknown) is None
    old = {**record("1enh", "all", 5.0), "options": {"fused_update": True}}  # fields missing
    assert ablation.record_options(old) == KernelOptions(fused_update=True)
    assert ablation.record_options({"label": "all-fp16"}) == KernelOptions.parse("all-fp16")


def test_the_chart_is_a_png(files, tmp_path):
    pytest.importorskip("matplotlib")
    path = ablation.plot(ablation.collect(ablation.load(files)), tmp_path / "c" / "a.png")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000


def test_an_empty_table_still_renders(tmp_path):
    pytest.importorskip("matplotlib")
    table = ablation.collect([])
    assert "No records of the ablation yet." in ablation.markdown(table)
    assert ablation.plot(table, tmp_path / "a.png").stat().st_size > 0


# -- the documentation -----------------------------------------------------------------
def test_the_doc_section_is_replaced_between_the_markers_only():
    doc = f"# Kernels\n\nBefore.\n{ablation.START}\nold table\n{ablation.END}\n\nAfter.\n"
    new = ablation.render_doc(doc, "new table")
    assert new == f"# Kernels\n\nBefore.\n{ablation.START}\nnew table\n{ablation.END}\n\nAfter.\n"
    assert ablation.doc_table(new) == "new table"
    assert ablation.render_doc(new, "new table") == new


@pytest.mark.parametrize("doc", ["# Kernels\n", f"x\n{ablation.START}\n",
                                 f"{ablation.END}\n{ablation.START}\n"])
def test_a_doc_without_the_markers_is_refused(doc):
    with pytest.raises(ValueError, match="no ablation section"):
        ablation.render_doc(doc, "table")
    assert ablation.doc_table(doc) == ""


def test_render_writes_the_outputs_and_the_docs(files, tmp_path):
    pytest.importorskip("matplotlib")
    doc, image = tmp_path / "kernels.md", tmp_path / "images" / "ablation.png"
    doc.write_text(f"# K\n{ablation.START}\n{ablation.END}\nrest\n")
    written = ablation.write_outputs(ablation.collect(ablation.load(files)), tmp_path / "out",
                                     docs=True, doc=doc, image=image)
    assert {p.name for p in written} == {"ablation.md", "ablation.png", "kernels.md"}
    assert image.read_bytes() == (tmp_path / "out" / "ablation.png").read_bytes()
    assert "| baseline | `baseline` | 4,000 (1.00×)" in doc.read_text()
    assert doc.read_text().endswith(f"{ablation.END}\nrest\n")


def test_render_refuses_a_doc_without_markers_before_writing_anything(files, tmp_path):
    doc = tmp_path / "kernels.md"
    doc.write_text("# no markers\n")
    with pytest.raises(ValueError):
        ablation.write_outputs(ablation.collect(ablation.load(files)), tmp_path / "out",
                               docs=True, doc=doc, image=tmp_path / "a.png")
    assert doc.read_text() == "# no markers\n" and not (tmp_path / "out" / "ablation.md").exists()


def test_main_render_mode(files, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    assert ablation.main(["--render", *map(str, files), "--out", str(out)]) == 0
    assert (out / "ablation.png").stat().st_size > 0
    assert "25,000" in (out / "ablation.md").read_text()
    assert "wrote" in capsys.readouterr().out


# -- the GPU loop, timed by a stand-in ---------------------------------------------------
def fake_run_case(rates, calls):
    def run_case(case, device, steps, warmup, repeats):
        calls.append((case.protein, case.label))
        if case.label == "fused_update":
            raise RuntimeError("kernel failed")
        return {**record(case.protein, case.label, rates.get(case.label, 100.0),
                         replicas=case.replicas), "options": case.options.to_dict()}
    return run_case


def loop_args(tmp_path, **kw):
    return SimpleNamespace(proteins=["cln025", "1enh"], replicas=4, steps=2, warmup=0,
                           repeats=1, model="demo", device="auto", out=str(tmp_path / "run"),
                           resume=False, budget_s=None, **kw)


def test_the_loop_writes_bench_json_in_the_standard_format(tmp_path):
    calls = []
    args = loop_args(tmp_path)
    records, problems = ablation.run_cases(args, "python -m benchmarks.ablation",
                                           fake_run_case({"baseline": 50.0}, calls))
    configs = ablation_configs()
    assert calls == [(p, c) for p in ("cln025", "1enh") for c in configs]
    assert problems == [f"{p} × 4 fused_update: failed: RuntimeError('kernel failed')"
                        for p in ("cln025", "1enh")]
    saved = json.loads((tmp_path / "run" / "bench.json").read_text())
    assert set(saved) == {"environment", "command", "records"}
    assert saved["command"] == "python -m benchmarks.ablation"
    assert len(saved["records"]) == len(records) == 2 * (len(configs) - 1)
    table = ablation.collect([("bench.json", saved)], ["cln025", "1enh"], replicas=4)
    assert cells(table)["all"]["1enh"].ratio == pytest.approx(2.0)


def test_resume_runs_only_the_missing_cases_and_the_budget_stops_new_ones(tmp_path):
    calls = []
    args = loop_args(tmp_path)
    args.budget_s = 0.0  # every case after the first is past the budget
    records, problems = ablation.run_cases(args, "cmd", fake_run_case({}, calls))
    assert calls == [("cln025", "baseline")] and len(records) == 1
    assert "past --budget-s" in problems[0] and "--resume" in problems[0]
    args.budget_s, args.resume = None, True
    calls.clear()
    records, _ = ablation.run_cases(args, "cmd", fake_run_case({}, calls))
    assert ("cln025", "baseline") not in calls and len(calls) == 2 * len(ablation_configs()) - 1
    assert len(records) == 2 * (len(ablation_configs()) - 1)
    other = ablation.pending_cases(["cln025"], ["baseline"], records, replicas=8)
    assert other == [("cln025", "baseline")]  # a record of 4 replicas does not count for 8


def test_the_gpu_run_is_refused_without_a_gpu_or_over_an_earlier_run(tmp_path, capsys,
                                                                      monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ablation.main(["--out", str(tmp_path)]) == 1
    assert "needs a CUDA GPU" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    (tmp_path / "bench.json").write_text("{}")
    assert ablation.main(["--out", str(tmp_path)]) == 1
    assert "--resume" in capsys.readouterr().err


def test_the_gpu_run_end_to_end_with_a_stand_in(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    import torch

    import workbench.benchmark

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(workbench.benchmark, "run_case", fake_run_case({"all": 300.0}, calls))
    monkeypatch.setattr(workbench.benchmark, "environment", lambda: ENV)
    out = tmp_path / "run"
    argv = ["--proteins", "2jof", "--replicas", "4", "--out", str(out)]
    assert ablation.main(argv) == 1  # fused_update failed
    printed = capsys.readouterr().out
    assert "1 case(s) failed or were not started" in printed
    assert {p.name for p in out.iterdir()} >= {"bench.json", "bench.md", "ablation.md",
                                               "ablation.png"}
    saved = json.loads((out / "bench.json").read_text())
    assert saved["command"] == "python -m benchmarks.ablation " + " ".join(argv)
    assert "300 (3.00×)" in (out / "ablation.md").read_text()
    calls.clear()
    assert ablation.main([*argv, "--resume"]) == 1  # only the failed case again
    assert calls == [("2jof", "fused_update")]
