#!/usr/bin/env bash
# Train the five shipped models on one GPU in one call, all proteins at once:
#   LIMIT=240 bash scripts/train_models.sh        # results in $OUT/models.tar
# Each job calibrates the teacher's ε, generates teacher data at 300/330/360 K, fits the
# priors, trains CGSchNet by force matching for at most LIMIT seconds, saves the model and
# its card, then validates student against teacher with MD (plots when matplotlib exists).
set -uo pipefail
OUT=${OUT:-artifacts/models}
DEST=${DEST:-/tmp/models}
LIMIT=${LIMIT:-240}
mkdir -p "$DEST"
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
train() {  # protein, folded-fraction target at 300 K, validation steps, validation temperatures
  timeout "${TIMEOUT:-530}" python -m workbench.cli train --protein "$1" --generate \
    --calibrate "$2" --calibrate-replicas 128 --calibrate-steps 10000 --calibrate-iterations 7 \
    --temperatures 300,330,360 --replicas 128 --steps 20000 --save-every 200 \
    --equilibration 2000 --epochs 100 --batch-size 32 --lr 1e-3 --patience 8 \
    --time-limit "$LIMIT" --seed 0 --device cuda --validate-steps "$3" \
    --validate-replicas 64 --validate-temperatures "$4" --quiet --out "$DEST" \
    > "$DEST/$1.out" 2>&1
  echo "$1 finished with exit code $?"
}
nvidia-smi --query-gpu=name --format=csv,noheader
train cln025 0.5 40000 300,330 &
train 2jof 0.5 40000 300,330 &
train 1yrf 0.9 10000 300,360 &
train 1enh 0.9 10000 300,360 &
train 2a3d 0.9 10000 300,360 &
wait
tail -n 8 "$DEST"/*.out
tar -C "$DEST" -cf "$OUT/models.tar" .
