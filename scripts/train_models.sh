#!/usr/bin/env bash
# Train the shipped models from their recipes, one job per protein, all at once on one GPU:
#   bash scripts/train_models.sh                      # every recipe, models in artifacts/models
#   PROTEINS="1yrf 1enh" bash scripts/train_models.sh --time-limit 60  # two, shorter
# Each job is `workbench train --config recipes/<protein>.yaml --out $OUT/<protein>` with the
# arguments given here appended (options on the command line override the recipe's); its
# output goes to $OUT/<protein>.out.
set -uo pipefail
OUT=${OUT:-artifacts/models}
for protein in ${PROTEINS:-cln025 2jof 1yrf 1enh 2a3d}; do
  mkdir -p "$OUT/$protein"
  workbench train --config "recipes/$protein.yaml" --quiet --out "$OUT/$protein" "$@" \
    > "$OUT/$protein.out" 2>&1 &
done
wait
tail -n 9 "$OUT"/*.out
