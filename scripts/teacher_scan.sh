#!/usr/bin/env bash
# Long runs of teacher variants, one after another on one GPU, and their populations:
#   PROTEIN=2jof VARIANTS="eps=0.3,barrier=0.5 eps=0.35,barrier=1" bash scripts/teacher_scan.sh
# Each variant (`workbench run --model teacher:VARIANT`: eps, dihedral, separation, barrier)
# runs REPLICAS replicas for STEPS steps (default 250,000: 1 ns at 4 fs), at most LIMIT
# seconds each; its metrics are kept even when the limit cuts it off. The replicas start
# native, or a share DENATURED of them (e.g. 0.5) from denatured chains, at 300 K or at each
# of TEMPERATURES (e.g. "300 360": does a large protein's teacher hold at 300 K and melt?).
# PARALLEL=K runs K variants at a time (the teacher's step is small and launch bound, so
# several runs share one GPU well).
# Then `scripts/run_states.py` prints folded and unfolded fractions, events and the Q
# histogram of every run. Results: $OUT/states.json, $OUT/states.md and $OUT/runs.tgz (the
# runs' metrics and logs, one archive: the device tool returns at most 8 files).
set -uo pipefail
OUT=${OUT:-artifacts/teacher-scan}
PROTEIN=${PROTEIN:-2jof}
VARIANTS=${VARIANTS:?give VARIANTS, e.g. "eps=0.3,barrier=0.5 eps=0.35,barrier=1"}
WORK=$(mktemp -d /tmp/teacher-scan.XXXXXX)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$(pwd):${PYTHONPATH:-}" PYTHONUNBUFFERED=1
run_variant() {  # $1: variant, $2: run name, $3: temperature (K)
  timeout "${LIMIT:-60}" python -m workbench.cli run --protein "$PROTEIN" \
    --model "teacher:$1" --replicas "${REPLICAS:-64}" --steps "${STEPS:-250000}" \
    --temperature "$3" \
    --kernels cuda_graph --save-interval 2500 --no-trajectory --quiet --out "$WORK/$2" \
    --denatured-fraction "${DENATURED:-0}" \
    > "$WORK/$2.log" 2>&1
  echo "$1 at $3 K: exit code $?"
}
names=()
for variant in $VARIANTS; do
  for temperature in ${TEMPERATURES:-300}; do
    name=$(echo "$variant" | tr ',=' '_-')
    [ -n "${TEMPERATURES:-}" ] && name="${name}_${temperature}K"
    names+=("$name")
    run_variant "$variant" "$name" "$temperature" &
    while [ "$(jobs -rp | wc -l)" -ge "${PARALLEL:-1}" ]; do wait -n; done
  done
done
wait
runs=()
for name in "${names[@]}"; do
  [ -f "$WORK/$name/metrics.csv" ] && runs+=("$name")
done
[ ${#runs[@]} -gt 0 ] && (cd "$WORK" && python "$OLDPWD/scripts/run_states.py" "${runs[@]}" \
  --out "$OUT/states.json") | tee "$OUT/states.md"
tar -C "$WORK" --exclude=checkpoint.pt -czf "$OUT/runs.tgz" .
