"""benchmarks/roofline.py and benchmarks/ncu.py on the CPU: ncu's raw CSV read from a canned
report, FLOPs by type, the roofline arithmetic, phases, and the documentation section."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import ncu, roofline

FIXTURE = Path(__file__).parent / "fixtures" / "ncu_raw.csv"
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char *, 1>>(int, at::native::FillFunctor<float>, "
        "at::detail::Array<char *, 1>)")


@pytest.fixture
def launches():
    return ncu.parse_raw_csv(FIXTURE.read_text())


def test_csv_rows_keep_names_with_commas_and_quotes(launches):
    assert [launch["name"] for launch in launches] == [
        "_cfconv_fwd_kernel", FILL, "_cfconv_fwd_kernel", 'void scan<"odd", 2>(float *, int)']


def test_csv_values_are_scaled_to_base_units(launches):
    first = launches[0]
    assert first["dram__bytes_read.sum"] == pytest.approx(2.048e6)  # 2,048.00 Kbyte
    assert first["dram__bytes_write.sum"] == 512
    assert first["gpu__time_duration.sum"] == pytest.approx(12_500)  # 12.50 usecond in ns
    assert first["sm__ops_path_tensor_src_fp16_dst_fp32.sum"] == 1_000_000
    assert "dram__bytes_read.sum" not in launches[3]  # n/a is left out, not zero


def test_csv_without_header_is_refused():
    with pytest.raises(ncu.NcuError, match="no CSV header"):
        ncu.parse_raw_csv("==PROF== No kernels were profiled.\n")


def test_flops_by_type():
    launch = {"smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 3.0,
              "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": 5.0,
              "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 7.0,
              "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum": 11.0,
              "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum": 13.0,
              "sm__ops_path_tensor_src_bf16_dst_fp32.sum": 100.0,
              "sm__ops_path_tensor_src_tf32_dst_fp32.sum": 1000.0,
              "dram__bytes_read.sum": 1e9}
    flops = ncu.launch_flops(launch, {"tensor_fp16": 2.0, "tensor_tf32": 0.5})
    assert flops == {"fp32": 3 + 5 + 2 * 7, "fp16_core": 22, "fp64": 13,
                     "tensor_fp16": 200, "tensor_tf32": 500}


def test_launches_of_one_kernel_are_summed(launches):
    kernels = ncu.per_kernel(launches, {"tensor_fp16": 2.0})
    cfconv = kernels["_cfconv_fwd_kernel"]
    assert cfconv.launches == 2
    assert cfconv.time_ns == pytest.approx(20_000)
    assert cfconv.dram_bytes == pytest.approx(2.048e6 + 512 + 1.024e6)
    assert cfconv.registers == 172
    assert cfconv.flops == {"fp32": 100 + 50 + 2 * 3000, "fp16_core": 20,
                            "tensor_fp16": 3_000_000}
    assert kernels[FILL].flops == {"fp32": 0, "fp16_core": 0, "tensor_fp16": 0}


def test_calibration_divides_known_flops_by_counted_ops():
    launches = [{"sm__ops_path_tensor_src_fp16_dst_fp32.sum": 4.0},
                {"sm__ops_path_tensor_src_fp16_dst_fp32.sum": 4.0},
                {"sm__ops_path_tensor_src_tf32_dst_fp32.sum": 16.0}]
    assert ncu.calibration_factors(launches, 16.0) == {"tensor_fp16": 2.0, "tensor_tf32": 1.0}
    assert ncu.calibration_factors([{"gpu__time_duration.sum": 1.0}], 16.0) == {}


def test_metrics_are_chosen_from_what_ncu_lists():
    listing = """Device gh100 (GH100)
------------------------------------- ---------- -------------------------------
Metric Name                           Metric Type Metric Description
dram__bytes_read                      Counter    # of bytes read from DRAM
lts__t_bytes                          Counter    # of bytes requested
sm__ops_path_tensor_src_fp16_dst_fp32 Counter    # of math ops executed in Tensor path
sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_on Counter # sparse
sm__ops_path_tensor_src_int8          Counter    # of math ops
smsp__sass_thread_inst_executed_op_ffma_pred_on Counter # of FFMA thread instructions
"""
    available = ncu.listed_metrics(listing)
    assert "Metric" not in available and "dram__bytes_read" in available
    assert ncu.choose_metrics(available) == [
        *ncu.BASE_METRICS, "lts__t_bytes.sum", "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"]


PEAKS = {"fp32": 50e12, "tensor_fp16": 800e12, "tensor_tf32": 400e12, "dram": 2e12}


def test_compute_peak_is_the_harmonic_mix_of_the_types():
    assert roofline.compute_peak({"tensor_fp16": 8e9}, PEAKS) == pytest.approx(800e12)
    # 4e9 at 400e12 (10 us) + 1e9 at 50e12 (20 us): 5e9 FLOP in 30 us
    mixed = roofline.compute_peak({"tensor_tf32": 4e9, "fp32": 1e9}, PEAKS)
    assert mixed == pytest.approx(5e9 / 30e-6)
    assert roofline.compute_peak({"fp64": 1.0}, PEAKS) is None
    assert roofline.compute_peak({}, PEAKS) is None


def test_roofline_point_of_a_memory_bound_kernel():
    point = roofline.roofline_point(1e-3, {"fp32": 1e9}, 1e9, PEAKS)
    assert point["flop_per_s"] == pytest.approx(1e12)
    assert point["bytes_per_s"] == pytest.approx(1e12)
    assert point["intensity"] == pytest.approx(1.0)
    assert point["ridge"] == pytest.approx(25.0)
    assert point["bound"] == "memory"
    assert point["frac_compute"] == pytest.approx(0.02)
    assert point["frac_dram"] == pytest.approx(0.5)


def test_roofline_point_of_a_compute_bound_kernel():
    point = roofline.roofline_point(2e-3, {"tensor_fp16": 8e11}, 1e9, PEAKS)
    assert point["intensity"] == pytest.approx(800.0)
    assert point["bound"] == "compute"
    assert point["frac_compute"] == pytest.approx(0.5)


def test_roofline_point_without_counters_or_flops():
    unknown = roofline.roofline_point(1e-3, None, None, PEAKS)
    assert unknown["bound"] is None and unknown["flop_per_s"] is None
    copy = roofline.roofline_point(1e-3, {"fp32": 0.0}, 1e9, PEAKS)
    assert copy["bound"] == "memory" and copy["intensity"] == 0


def test_peaks_prefer_measured_and_know_the_gpu():
    sheet = roofline.datasheet_peaks("NVIDIA H100 80GB HBM3")
    assert sheet["dram"] == 3.35e12 and sheet["fp16_core"] == 2 * sheet["fp32"]
    assert roofline.datasheet_peaks("NVIDIA H100 PCIe")["dram"] == 2.0e12
    assert roofline.datasheet_peaks("NVIDIA H200")["dram"] == 4.8e12
    assert roofline.datasheet_peaks("Tesla T4") == {}
    used = roofline.combined_peaks({"fp32": 40e12, "dram": 3e12, "tensor_tf32": None}, sheet)
    assert used["fp32"] == 40e12 and used["fp16_core"] == 80e12
    assert used["tensor_tf32"] == sheet["tensor_tf32"] and used["dram"] == 3e12


def test_phases_by_name_then_by_host_ops():
    assert roofline.phase_by_name("_cfconv_bwd_kernel") == "backward"
    assert roofline.phase_by_name("_tab_fwd_kernel") == "forward"
    assert roofline.phase_by_name("_drift_kernel") == "integrator"
    assert roofline.phase_by_name(FILL) is None
    root = SimpleNamespace(name="autograd::engine::evaluate_function: MulBackward0",
                           cpu_parent=None, kernels=[])
    mul = SimpleNamespace(name="aten::mul", cpu_parent=root, kernels=[SimpleNamespace(name="k")])
    forces = SimpleNamespace(name=roofline.FORCES_RANGE, cpu_parent=None, kernels=[])
    fwd = SimpleNamespace(name="aten::mul", cpu_parent=forces,
                          kernels=[SimpleNamespace(name="k"), SimpleNamespace(name="f")])
    other = SimpleNamespace(name="aten::add", cpu_parent=None, kernels=[SimpleNamespace(name="o")])
    prof = SimpleNamespace(events=lambda: [root, mul, forces, fwd, other])
    assert roofline.kernel_phases(prof) == {"k": "backward+forward", "f": "forward", "o": "other"}


def test_rows_join_profiler_times_with_ncu_counts_per_step(launches):
    counts = ncu.per_kernel(launches, {"tensor_fp16": 2.0})
    profiled = [("_cfconv_fwd_kernel", 1.0, 10.0), ("only_in_profiler", 2.0, 1.0)]
    rows = roofline.merge_rows(profiled, {"only_in_profiler": "other"}, counts, 2, PEAKS)
    by_name = {row["name"]: row for row in rows}
    cfconv = by_name["_cfconv_fwd_kernel"]
    assert cfconv["time_source"] == "torch.profiler" and cfconv["phase"] == "forward"
    assert cfconv["flops"] == pytest.approx((6150 + 20 + 3_000_000) / 2)  # two steps under ncu
    assert cfconv["flop_per_s"] == pytest.approx(cfconv["flops"] / 10e-6)
    assert by_name["only_in_profiler"]["flops"] is None
    assert by_name[FILL]["time_source"] == "ncu"
    assert by_name[FILL]["time_us"] == pytest.approx(0.75)
    assert [row["time_us"] for row in rows] == sorted((r["time_us"] for r in rows), reverse=True)


def test_rows_match_by_short_name_when_only_one_kernel_has_it(launches):
    counts = ncu.per_kernel(launches, {})
    profiled = [("void scan<\"odd\", 2>(float*, int)", 1.0, 5.0)]  # spelled differently
    rows = roofline.merge_rows(profiled, {}, counts, 1, PEAKS)
    assert [row["time_source"] for row in rows].count("ncu") == 2  # cfconv, fill
    scan = next(row for row in rows if row["name"].startswith("void scan"))
    assert scan["time_source"] == "torch.profiler" and scan["ncu_time_us"] == 1.0


def _result():
    row = {"name": "_cfconv_bwd_kernel", "phase": "backward", "calls_per_step": 3.0,
           "time_us": 900.0, "flops": 2e9, "dram_bytes": 5e7, "flop_per_s": 2.2e12,
           "bytes_per_s": 5.5e10, "intensity": 40.0, "frac_compute": 0.05, "frac_dram": 0.02,
           "bound": "compute", "time_source": "torch.profiler"}
    return {"environment": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.13", "triton": "3.6",
                            "date": "2026-11-27"},
            "command": "python -m benchmarks.roofline --out r.json", "protein": "1enh",
            "replicas": 64, "peaks": {"measured": {"dram": 3e12}, "datasheet": PEAKS,
                                      "used": PEAKS},
            "configs": [{"config": "all", "counters": "ncu", "rows": [row],
                         "total_us": 900.0, "kernels_per_step": 3.0}]}


def test_render_replaces_the_section_and_is_idempotent():
    doc = f"# Kernels\n\n{roofline.START}\nold table\n{roofline.END}\n\nAfter.\n"
    once = roofline.render(_result(), doc)
    assert "old table" not in once and once.endswith(f"{roofline.END}\n\nAfter.\n")
    assert "NVIDIA H100 80GB HBM3" in once and "python -m benchmarks.roofline --out" in once
    assert "| `_cfconv_bwd_kernel` | backward | 3.0 | 900.0 | 2.00 |" in once
    assert "By phase: backward 900 µs." in once
    assert roofline.render(_result(), once) == once


def test_render_refuses_a_document_without_markers():
    with pytest.raises(ValueError, match="no roofline section"):
        roofline.render(_result(), "# Kernels\n")
    with pytest.raises(ValueError, match="no roofline section"):
        roofline.render(_result(), f"{roofline.END}\n{roofline.START}\n")


@pytest.mark.parametrize("name", ["r.json", "r.json.gz"])
def test_render_command_writes_the_doc(tmp_path, name):
    result, doc = tmp_path / name, tmp_path / "kernels.md"
    text = json.dumps(_result()).encode()
    result.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    doc.write_text(f"x\n{roofline.START}\n{roofline.END}\n")
    roofline.main(["--render", str(result), "--doc", str(doc)])
    assert "_cfconv_bwd_kernel" in doc.read_text()


@pytest.mark.parametrize("with_ncu", [True, False])
def test_measure_joins_everything_into_json_and_table(tmp_path, monkeypatch, capsys, with_ncu):
    """The orchestration with the GPU parts replaced: ncu's CSV from the fixture, or no
    ncu at all (then the table has times only and the output says so)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(roofline, "environment", lambda: _result()["environment"])
    monkeypatch.setattr(roofline, "measure_ceilings", lambda: {"dram": 3e12, "fp32": 50e12})
    monkeypatch.setattr(roofline, "profile_config", lambda *a: (
        [("_cfconv_fwd_kernel", 2.0, 30.0)], {}))
    monkeypatch.setattr(ncu, "find_ncu", lambda given: "/bin/ncu" if with_ncu else None)
    monkeypatch.setattr(ncu, "query_metrics", lambda path: {"dram__bytes_read"})
    monkeypatch.setattr(ncu, "run_ncu", lambda *a, **k: FIXTURE.read_text())
    out = tmp_path / "r.json"
    roofline.main(["--configs", "all,baseline", "--out", str(out)])
    result = json.loads(out.read_text())
    assert [c["config"] for c in result["configs"]] == ["all", "baseline"]
    row = result["configs"][0]["rows"][0]
    assert row["name"] == "_cfconv_fwd_kernel" and row["time_us"] == 30.0
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith("|")
    assert out.with_suffix(".md").read_text().strip() in printed
    if with_ncu:
        assert row["dram_bytes"] == pytest.approx(2.048e6 + 512 + 1.024e6)
        assert result["peaks"]["used"]["dram"] == 3e12
    else:
        assert row["flops"] is None and "ncu not found" in printed


def test_configurations_past_the_budget_are_skipped(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(roofline, "environment", lambda: _result()["environment"])
    monkeypatch.setattr(roofline, "measure_ceilings", lambda: {})
    monkeypatch.setattr(ncu, "find_ncu", lambda given: None)
    out = tmp_path / "r.json"
    roofline.main(["--configs", "all", "--out", str(out), "--budget-s", "-1"])
    assert json.loads(out.read_text())["configs"] == []
    assert "all: skipped, past the --budget-s" in capsys.readouterr().out


def test_short_names_and_dominant_flop_type():
    assert roofline.short_name(FILL) == \
        "vectorized_elementwise_kernel<4, FillFunctor<float>, Array<char *, 1>>"
    assert roofline.short_name("void f<(int)3>(float)") == "f<(int)3>"
    assert len(roofline.short_name("k" * 200)) == 72
    # 1e9 FP32 FLOPs take 20 us, 4e9 TF32 FLOPs 10 us: FP32 is the roof that matters
    assert roofline.dominant_type({"tensor_tf32": 4e9, "fp32": 1e9}, PEAKS) == "fp32"
    assert roofline.dominant_type({"fp32": 0.0}, PEAKS) is None


def test_phase_totals():
    rows = [{"phase": "forward", "time_us": 2.0}, {"phase": "backward", "time_us": 3.0},
            {"phase": "forward", "time_us": 4.0}]
    assert roofline.phase_totals(rows) == {"forward": 6.0, "backward": 3.0}


def test_sm_counters_only_where_no_smsp_one_is_listed():
    available = {"sm__sass_thread_inst_executed_op_ffma_pred_on",
                 "smsp__sass_thread_inst_executed_op_ffma_pred_on",
                 "sm__sass_thread_inst_executed_op_fadd_pred_on"}
    assert ncu.choose_metrics(available)[len(ncu.BASE_METRICS):] == [
        "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"]


def test_coverage_notes_say_what_the_counts_miss():
    notes = ncu.coverage_notes(list(ncu.BASE_METRICS), {"tensor_fp16": 2.0})
    assert len(notes) == 3 and "tensor-core FLOPs are missing" in notes[0]
    full = [*ncu.BASE_METRICS, "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"]
    assert ncu.coverage_notes(full, {"tensor_fp16": 2.0, "tensor_tf32": 2.0}) == []


def test_failing_or_slow_commands_raise_with_their_output():
    import sys
    with pytest.raises(ncu.NcuError, match="exited 3.*ERR_X"):
        ncu._checked([sys.executable, "-c", "print('ERR_X'); raise SystemExit(3)"], 30)
    with pytest.raises(ncu.NcuError, match="timed out"):
        ncu._checked([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
    with pytest.raises(ncu.NcuError, match="cannot run"):
        ncu._checked(["/nonexistent/ncu"], 5)
    assert ncu._checked([sys.executable, "-c", "print('ok')"], 30) == "ok\n"


def test_a_misspelt_configuration_fails_before_any_gpu_work(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(roofline, "environment", lambda: pytest.fail("GPU work started"))
    with pytest.raises(SystemExit, match="failed"):
        roofline.main(["--configs", "all, al-fp16", "--out", "unused.json"])
