#!/usr/bin/env bash
# MD validation of the five shipped models against their teachers, and the tabulated-filter
# check of issue 6 (trained CLN025: Q histogram with tables vs the exact fused path), on one
# GPU in one call; everything lands in $OUT/validation.tar:
#   bash scripts/validate_models.sh
set -uo pipefail
OUT=${OUT:-artifacts/validation}
DATA=workbench/models/data
RES=/tmp/validation
mkdir -p "$OUT" "$RES"
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
validate() {  # protein, temperatures, steps
  timeout "${TIMEOUT:-540}" python -m workbench.cli validate --model "$DATA/$1.pt" \
    --temperatures "$2" --steps "$3" --replicas 64 --seed 0 --device cuda > "$RES/$1.out" 2>&1
  echo "$1 finished with exit code $?"
}
nvidia-smi --query-gpu=name --format=csv,noheader
validate cln025 300 "${STEPS_SMALL:-30000}" &
validate 2jof 300 "${STEPS_SMALL:-30000}" &
validate 1yrf 300,360 "${STEPS_LARGE:-5000}" &
validate 1enh 300,360 "${STEPS_LARGE:-5000}" &
validate 2a3d 300,360 "${STEPS_LARGE:-5000}" &
timeout "${TIMEOUT:-540}" python - > "$RES/tables_vs_exact.out" 2>&1 <<'PY' &
import json
from workbench.model.io import load_potential
from workbench.model.options import KernelOptions
from workbench.system import build_system
from workbench.training.validate import compare_force_paths

paths = {
    "tables": KernelOptions.all_on(tabulated_filter=True, cuda_graph=True),
    "exact": KernelOptions.all_on(cuda_graph=True),
}
steps = 20000
result = compare_force_paths(
    build_system("cln025"), load_potential("workbench/models/data/cln025.pt"), paths,
    300.0, 64, steps, 20, "cuda", 0,
)
result.update(protein="cln025", temperature=300.0, replicas=64, steps=steps)
print(json.dumps(result, indent=2))
with open("/tmp/validation/tables_vs_exact.json", "w") as handle:
    json.dump(result, handle, indent=2)
PY
wait
tail -n 8 "$RES"/*.out
cp "$DATA"/*.json "$DATA"/*.validation.* "$RES"/ 2>/dev/null
tar -C "$RES" -cf "$OUT/validation.tar" .
