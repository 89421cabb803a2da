"""benchmarks/bench_egnn_backward.py at a small size: both backward variants of the EGNN edge
block timed, agreeing, printed and written (on the CPU under the interpreter)."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_egnn_backward import main
from kernels import triton_available
from kernels.egnn_edge import SAVED


@pytest.mark.slow
@pytest.mark.skipif(not triton_available(), reason="needs Triton (a GPU or the interpreter)")
def test_bench_egnn_backward_runs_both_variants(tmp_path, capsys):
    out = tmp_path / "egnn_backward.json"
    record = main(["--protein", "cln025", "--replicas", "1", "--width", "16", "--cutoff", "5",
                   "--repeats", "1", "--operands", "fp16", "--out", str(out)])
    assert json.loads(out.read_text())["results"] == record["results"]
    assert [(r["operands"], r["saved"]) for r in record["results"]] == [
        ("fp16", saved) for saved in SAVED]
    # the stored variant keeps z in fp16: its gradients move by that rounding
    assert all(r["rel_rms_vs_none"] < 1e-3 and r["forward_backward_ms"] > 0
               for r in record["results"])
    assert "| fp16 | activations |" in capsys.readouterr().out
