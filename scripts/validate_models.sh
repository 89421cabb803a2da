#!/usr/bin/env bash
# MD validation of the five shipped models against their teachers, on one GPU in one call
# (five jobs at once); everything lands in $OUT/validation.tar:
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
wait
tail -n 8 "$RES"/*.out
cp "$DATA"/*.json "$DATA"/*.validation.* "$RES"/ 2>/dev/null
tar -C "$RES" -cf "$OUT/validation.tar" .
