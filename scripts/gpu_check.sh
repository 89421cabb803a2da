#!/usr/bin/env bash
# Full-size GPU checks and benchmarks in one go (for a lent GPU; results under $OUT).
#   bash scripts/gpu_check.sh [quick]
# Writes: gpu.txt, gpu_tests.txt, ablation/, proteins/, determinism.txt, sweep/, profile.txt
set -uo pipefail
OUT=${OUT:-artifacts/gpu}
mkdir -p "$OUT"
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python -m pytest -m gpu tests/kernels tests/model -q -p no:cacheprovider 2>&1 \
  | tee "$OUT/gpu_tests.txt" | tail -n 5
python -m workbench.cli bench --proteins 1enh --replicas 64 \
  --configs baseline,fused_radial_basis,fused_message_passing,csr_aggregation,fused_update,all,all-fp16,all-bf16 \
  --breakdown --out "$OUT/ablation" 2>&1 | tail -n 14
python -m workbench.cli bench --proteins cln025,2jof,1yrf,2a3d --replicas 64 \
  --configs baseline,all,all-fp16 --out "$OUT/proteins" 2>&1 | tail -n 16
python -c "from workbench.determinism import runs_are_bitwise_identical as f; \
print('all-on, same seed, 1ENH x 16, 50 steps: bitwise identical =', f())" | tee "$OUT/determinism.txt"
[ "${1:-}" = quick ] && exit 0
python -m workbench.cli bench --proteins 1enh --replicas 16,256,1024,4096 --configs all-fp16 \
  --steps 50 --repeats 2 --warmup 5 --out "$OUT/sweep" 2>&1 | tail -n 8
python -m workbench.cli bench --proteins 1enh --replicas 64 --configs baseline --steps 20 \
  --repeats 1 --warmup 5 --profile --out "$OUT/profile" > "$OUT/profile.txt" 2>&1
head -n 30 "$OUT/profile.txt"
