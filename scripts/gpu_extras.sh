#!/usr/bin/env bash
# One GPU call for: a kernel switched off and on in a running simulation (what the live
# plot receives), the fastest path on three proteins, the 1ENH replica sweep to 16,384,
# parallel tempering of 1ENH on an 8-level ladder, and the trained CLN025 model's Q
# histogram with tabulated filters against the exact fused path. Results: $OUT/extras.tar
#   bash scripts/gpu_extras.sh
set -uo pipefail
OUT=${OUT:-artifacts/extras}
RES=/tmp/extras
mkdir -p "$OUT" "$RES"
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
bench() { timeout 150 python -m workbench.cli bench "$@" 2>&1 | grep -v "^|"; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$RES/gpu.txt"
timeout 120 python scripts/live_switch_check.py "$RES/live_switch.json" 1enh 64 12 2>&1 \
  | grep -v Warning | tail -n 5
bench --proteins 1enh,2a3d,cln025 --replicas 64 --steps 200 --repeats 2 --warmup 10 \
  --configs tables+graph --out "$RES/fastest" | tee "$RES/fastest.txt"
bench --proteins 1enh --replicas 1024,4096,16384 --configs tables+graph --steps 10 \
  --repeats 2 --warmup 2 --out "$RES/sweep" | tee "$RES/sweep.txt"
timeout 120 python -m workbench.cli run --protein 1enh --replicas 512 --ladder 300:450:8 \
  --exchange-every 100 --steps 2000 --kernels tables+graph --device cuda --quiet \
  --no-trajectory --out "$RES/tempering" 2>&1 | tail -n 25 | tee "$RES/tempering.txt"
timeout 200 python scripts/tables_vs_exact.py --steps 10000 > "$RES/tables_vs_exact.txt" 2>&1
tail -n 20 "$RES/tables_vs_exact.txt"
tar -C "$RES" -cf "$OUT/extras.tar" .
