#!/usr/bin/env bash
# On a two-GPU machine, in one call: aggregate throughput of 1ENH sharded over both GPUs
# against one GPU (fastest path and reference path), then the live kernel-switch check on
# GPU 0. Small JSON files land in $OUT.
#   bash scripts/gpu_two.sh
set -uo pipefail
OUT=${OUT:-artifacts/two_gpus}
mkdir -p "$OUT"
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
env | grep -E "NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS"
for kernels in tables+graph baseline; do
  timeout 200 python scripts/multi_gpu_bench.py --protein 1enh --replicas-per-gpu 64 \
    --steps 400 --kernels "$kernels" --timeout 90 --out "$OUT/scaling_${kernels/+/_}.json" 2>&1 \
    | grep -v Warning | tail -n 6
done
CUDA_VISIBLE_DEVICES=0 timeout 100 python scripts/live_switch_check.py "$OUT/live_switch.json" \
  1enh 64 12 2>&1 | grep -v Warning | tail -n 5
