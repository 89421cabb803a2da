#!/usr/bin/env bash
# CUDA-graph figures on a lent GPU in one call (results under $OUT):
#   bash scripts/gpu_graphs.sh
# GPU tests of the captured step, the 1ENH x 64 ablation with every technique alone and
# combined (with launch counts), CLN025 and 2A3D, and the 1ENH replica sweep to 16,384.
set -uo pipefail
OUT=${OUT:-artifacts/gpu}
mkdir -p "$OUT"
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
bench() { python -m workbench.cli bench "$@" 2>&1 | grep -v "^|"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
timeout 300 python -m pytest -m gpu -q -x tests/md > "$OUT/gpu_tests.txt" 2>&1
tail -n 30 "$OUT/gpu_tests.txt"
bench --proteins 1enh --replicas 64 --steps 200 --repeats 2 --warmup 20 --launches \
  --configs baseline,fused_radial_basis,fused_message_passing,csr_aggregation,fused_update,tabulated_filter,cuda_graph,all,all-fp16,all+graph,all+graph-fp16,all+tables,all+tables+graph,all+tables+graph-fp16 \
  --out "$OUT/ablation" | tee "$OUT/ablation.txt"
bench --proteins cln025,2jof,1yrf,2a3d --replicas 64 --steps 200 --repeats 2 --warmup 20 \
  --configs baseline,all+graph,all+tables+graph --out "$OUT/proteins" | tee "$OUT/proteins.txt"
bench --proteins 1enh --replicas 16,256,1024,4096,16384 --configs all+tables+graph --steps 20 \
  --repeats 2 --warmup 3 --out "$OUT/sweep" | tee "$OUT/sweep.txt"
