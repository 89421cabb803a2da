#!/usr/bin/env bash
# A same-call A/B of the working tree against an earlier commit, then the figures a speed
# session records (results and logs under $OUT):
#   git archive <commit> workbench kernels scripts | (mkdir -p runs/base && tar -x -C runs/base)
#   BASE_DIR=runs/base bash scripts/gpu_ab.sh      # carry runs/base with the device call
# 1. A/B: the base and the working tree alternate, each in its own process (base, new,
#    base, new), on $AB_PROTEINS with $CONFIG; a ratio table from the records.
# 2. The five proteins with $CONFIG (SKIP_FIVE=1 skips).
# 3. The 1ENH replica sweep; 16,384 replicas in a process of their own (a case after others
#    can run out of memory that it alone does not need). SKIP_SWEEP=1 skips.
# 4. The 1ENH step profile and the force error of $CONFIG and its 16-bit variants
#    (SKIP_PROFILE=1 skips).
# Every step has a time limit; a step that fails is reported and the next one runs. Lines
# the bench prints for failed or out-of-memory cases are kept in the output.
set -uo pipefail
OUT=${OUT:-artifacts/gpu-ab}
CONFIG=${CONFIG:-tables+graph}
AB_PROTEINS=${AB_PROTEINS:-1enh,cln025}
DEVICE=${DEVICE:-cuda}
REPLICAS=${REPLICAS:-64}
STEPS=${STEPS:-200}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
root=$(pwd)
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
bench() {  # folder (code to run), output name, time limit, bench arguments...
  local dir=$1 name=$2 limit=$3
  shift 3
  (cd "$dir" && PYTHONPATH=. timeout "$limit" python -m workbench.cli bench --device "$DEVICE" \
    "$@" --out "$OUT/$name") > "$OUT/$name.log" 2>&1
  local rc=$?
  grep -E "^\||out of memory|failed" "$OUT/$name.log"
  [ "$rc" -eq 0 ] || log "$name: exit code $rc"
}
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name --format=csv,noheader
A=(--proteins "$AB_PROTEINS" --replicas "$REPLICAS" --steps "$STEPS" --repeats 2 --warmup 20
   --configs "$CONFIG")
if [ -n "${BASE_DIR:-}" ]; then
  for i in 1 2; do
    log "A/B round $i"
    bench "$BASE_DIR" "base$i" "${AB_TIMEOUT:-200}" "${A[@]}"
    bench "$root" "new$i" "${AB_TIMEOUT:-200}" "${A[@]}"
  done
  PYTHONPATH=. python - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def rates(name):
    path = out / name / "bench.json"
    if not path.is_file():
        return {}
    return {(r["protein"], r["replicas"]): r["timestep_mol_per_s"]
            for r in json.loads(path.read_text())["records"]}
runs = {name: rates(name) for name in ("base1", "new1", "base2", "new2")}
print("| case | base | new | ratio |\n|---|---|---|---|")
for key in sorted(set().union(*runs.values())):
    base = [runs[n][key] for n in ("base1", "base2") if key in runs[n]]
    new = [runs[n][key] for n in ("new1", "new2") if key in runs[n]]
    ratio = f"{sum(new) / len(new) / (sum(base) / len(base)):.3f}x" if base and new else "-"
    print(f"| {key[0]} x {key[1]} | {' / '.join(f'{b:,.0f}' for b in base)} | "
          f"{' / '.join(f'{v:,.0f}' for v in new)} | {ratio} |")
EOF
fi
if [ -z "${SKIP_FIVE:-}" ]; then
  log "five proteins"
  bench "$root" five "${FIVE_TIMEOUT:-200}" --proteins cln025,2jof,1yrf,1enh,2a3d \
    --replicas "$REPLICAS" --steps "$STEPS" --repeats 2 --warmup 20 --configs "$CONFIG"
fi
if [ -z "${SKIP_SWEEP:-}" ]; then
  log "replica sweep"
  bench "$root" sweep "${SWEEP_TIMEOUT:-150}" --proteins 1enh --replicas 64,256,1024,4096 \
    --steps 20 --repeats 1 --warmup 5 --configs "$CONFIG"
  bench "$root" sweep16k "${SWEEP_TIMEOUT:-150}" --proteins 1enh --replicas 16384 --steps 20 \
    --repeats 1 --warmup 5 --configs "$CONFIG"
fi
if [ "$DEVICE" = cuda ] && [ -z "${SKIP_PROFILE:-}" ]; then
  log "profile"
  PYTHONPATH=. timeout 100 python scripts/profile_step.py --protein 1enh --kernels "$CONFIG" \
    --out "$OUT/profile.json" > "$OUT/profile.log" 2>&1 || log "profile: failed (see profile.log)"
  grep -v -i warn "$OUT/profile.log" | head -24
  grep "^autotuned" "$OUT/profile.log"
  log "force error"
  PYTHONPATH=. timeout 150 python scripts/force_error.py --protein 1enh \
    --configs "$CONFIG,$CONFIG-fp16" --out "$OUT/force_error.json" > "$OUT/force_error.log" 2>&1 \
    || log "force error: failed (see force_error.log)"
fi
log "done"
