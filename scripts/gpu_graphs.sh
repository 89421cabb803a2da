#!/usr/bin/env bash
# CUDA-graph figures on a lent GPU in one call (everything lands in $OUT/results.tar):
#   bash scripts/gpu_graphs.sh
# GPU tests of the captured step, the 1ENH x 64 ablation (launch counts included), CLN025
# and 2A3D, and a profile of the baseline step.
set -uo pipefail
OUT=${OUT:-artifacts/gpu}
RES="$OUT/res"
mkdir -p "$RES"
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
bench() { timeout "${BENCH_TIMEOUT:-200}" python -m workbench.cli bench "$@" 2>&1 | grep -v "^|"; }
body() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$RES/gpu.txt"
  timeout 150 python -m pytest -m gpu -q -x tests/md > "$RES/gpu_tests.txt" 2>&1
  tail -n 15 "$RES/gpu_tests.txt"
  bench --proteins 1enh --replicas 64 --steps 100 --repeats 2 --warmup 10 --launches \
    --configs baseline,tabulated_filter,cuda_graph,all-fp16,all+graph-fp16,all+tables,all+tables+graph \
    --out "$RES/ablation" | tee "$RES/ablation.txt"
  bench --proteins cln025,2a3d --replicas 64 --steps 100 --repeats 2 --warmup 10 \
    --configs baseline,all+tables+graph --out "$RES/proteins" | tee "$RES/proteins.txt"
  bench --proteins 1enh --replicas 64 --configs baseline --steps 10 --repeats 1 --warmup 5 \
    --profile --out "$RES/profile" > "$RES/profile.txt" 2>&1
  grep -A 22 "Name" "$RES/profile.txt" | cut -c1-160 | head -n 24
}
timeout "${TOTAL_TIMEOUT:-560}" bash -c "$(declare -f bench body); RES=$RES; body"
tar -C "$RES" -cf "$OUT/results.tar" .
