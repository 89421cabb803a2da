#!/usr/bin/env bash
# The benchmark protocol in one GPU call (results under $OUT):
#   bash scripts/gpu_protocol.sh
# GPU tests of the model, kernels and MD; variants of the reference path; the protocol
# run (baseline and the fastest paths on 1ENH, 2A3D and CLN025, same run); a profile of
# the fastest 1ENH step.
set -uo pipefail
OUT=${OUT:-artifacts/gpu}
mkdir -p "$OUT"
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
bench() { timeout "${BENCH_TIMEOUT:-240}" python -m workbench.cli bench "$@" 2>&1 | grep -v "^|"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
timeout 240 python -m pytest -m gpu -q -p no:cacheprovider tests/md tests/kernels tests/model \
  > "$OUT/gpu_tests.txt" 2>&1
tail -n 5 "$OUT/gpu_tests.txt"
timeout 120 python scripts/reference_variants.py 2>&1 | grep -v Warn | tee "$OUT/variants.txt"
bench --proteins 1enh,2a3d,cln025 --replicas 64 --steps 200 --repeats 2 --warmup 20 \
  --configs baseline,tables+graph,all+tables+graph --out "$OUT/protocol" | tee "$OUT/protocol.txt"
bench --proteins 1enh --replicas 64 --configs tables+graph --steps 20 --repeats 1 --warmup 5 \
  --profile --out "$OUT/profile" > "$OUT/profile.txt" 2>&1
head -n 30 "$OUT/profile.txt"
