#!/usr/bin/env bash
# Full-size GPU checks and benchmarks in one go (for a lent GPU; results under $OUT).
#   bash scripts/gpu_check.sh
# Writes: gpu.txt, variants.txt, gpu_tests.txt, ablation/, proteins/, determinism.txt,
# sweep/, profile.txt
set -uo pipefail
OUT=${OUT:-artifacts/gpu}
mkdir -p "$OUT"
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
bench() { python -m workbench.cli bench "$@"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python scripts/reference_variants.py 2>&1 | tee "$OUT/variants.txt"
bench --proteins 1enh --replicas 64 --steps 200 --repeats 2 --warmup 20 --breakdown \
  --configs baseline,fused_radial_basis,fused_message_passing,csr_aggregation,fused_update,tabulated_filter,all,all-fp16,all-bf16,all+tables,all+tables-fp16 \
  --out "$OUT/ablation" 2>&1 | grep -v "^|" | tee "$OUT/ablation.txt"
bench --proteins cln025,2jof,1yrf,2a3d --replicas 64 --steps 200 --repeats 2 --warmup 20 \
  --configs baseline,all-fp16,all+tables --out "$OUT/proteins" 2>&1 | grep -v "^|" \
  | tee "$OUT/proteins.txt"
python - <<'PY' 2>&1 | tee "$OUT/determinism.txt"
from workbench.determinism import runs_are_bitwise_identical as same
from workbench.model.options import KernelOptions as K
for name, opt in (("all", K.all_on()), ("all+tables", K.all_on(tabulated_filter=True))):
    print(f"{name}, same seed, 1ENH x 16, 50 steps: bitwise identical = {same(options=opt)}")
PY
bench --proteins 1enh --replicas 16,256,1024,4096 --configs all+tables --steps 50 --repeats 2 \
  --warmup 5 --out "$OUT/sweep" 2>&1 | grep -v "^|" | tee "$OUT/sweep.txt"
bench --proteins 1enh --replicas 64 --configs baseline --steps 20 --repeats 1 --warmup 5 \
  --profile --out "$OUT/profile" > "$OUT/profile.txt" 2>&1
head -n 25 "$OUT/profile.txt"
