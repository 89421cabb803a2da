#!/usr/bin/env bash
# Train the five shipped models on one GPU in one call, all proteins at once:
#   bash scripts/train_models.sh             # results in $OUT/models.tar
#   CONTINUE=1 bash scripts/train_models.sh  # more training of the shipped models
#   PROTEINS=cln025 REPLICAS=768 BATCH=128 CONTINUE=1 bash scripts/train_models.sh  # one
#       protein with the whole GPU, eight times the teacher data, larger batches
#   SAMPLER=1 ...  # also frames the shipped model samples, labelled by the teacher
#   SAMPLER=1 SAMPLER_START=runs/cln025-5ns SAMPLER_REPLICAS=256 SAMPLER_STEPS=6000 ...
#       # ... sampled from where a long run of the model drifted (its checkpoint)
#   FROM=runs/m4 CONTINUE=1 SAMPLER=1 ...  # continue (and sample with) the model in runs/m4
#   CHECK=150 WALL=400 ...  # then a 150-s run of the new model (a round and its check)
#   TEACHER_EQ=500000 CHECK=380 ...  # a teacher run first: the data start from where it
#       ended, and the check run (same mixed starts) is validated against it (2JOF's recipe
#       in docs/models.md, sixteenth session, with REPULSION=cutoff TF32=1 SAMPLER=1)
#   TEMPERATURES=300,360,420 ...  # teacher data at these temperatures (default 300,330,360)
#   TEACHER_START=runs/teacher CHECK=200 ...  # the check run is validated against that
#       teacher run where it holds uncompressed metrics (metrics.csv)
#   SAVE_DATA=1 ...; then DATA=/tmp/c1 FROM=/tmp/c1 CONTINUE=1 ...  # keep the generated
#       data (<protein>.data.pt in DEST) and train on it in the next call on the same warm
#       machine: that call's whole time goes to training
#   SAVE_DATA=1 ...; then DATA=/tmp/c1 FROM=/tmp/c2 CONTINUE=1 SAMPLER=1 ...  # sampler rounds
#       on the saved teacher frames: each call samples afresh with the FROM model
# Every teacher uses the ε of TEACHER_EPSILON (CLN025 and 2JOF calibrated to fold half the
# time at 300 K; `workbench train --calibrate` redoes that). Each job generates teacher data
# at the TEMPERATURES (300/330/360 K), fits the priors (or keeps those of the model it
# continues) and trains CGSchNet by force matching for at most its time limit, then saves
# the model and its card.
# The MD validation runs separately (scripts/validate_models.sh).
set -uo pipefail
OUT=${OUT:-artifacts/models}
# DEST: a new, empty folder per call (a machine kept warm between calls would otherwise
# hand the last call's models and check runs on as this call's)
if [ -n "${DEST:-}" ] && [ -n "$(ls -A "$DEST" 2>/dev/null)" ]; then
  echo "error: DEST=$DEST is not empty; give a new folder" >&2
  exit 2
fi
DEST=${DEST:-$(mktemp -d /tmp/models.XXXXXX)}
mkdir -p "$DEST" "$OUT"
export PYTHONPATH=".:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
pack() {  # DEST as it is now into $OUT/models.tar (a new archive renamed over the old one,
  # so jobs that pack at once never leave a torn file): a call cut short by the device's
  # time limit still returns what was packed last
  local part
  part=$(mktemp "$OUT/models.tar.XXXXXX")
  tar -C "$DEST" --exclude="*.data.pt" -cf "$part" . && mv -f "$part" "$OUT/models.tar"
}
train() {  # protein, training seconds, extra arguments
  local protein=$1 limit=$2
  shift 2
  # CONTINUE=1: continue the shipped model (weights, priors, epoch log) instead of a new one;
  # FROM=DIR: the models in DIR (<protein>.pt, .log.csv) instead of the shipped ones, for
  # CONTINUE and SAMPLER alike (a round of training on what the last round's model samples)
  local from=${FROM:-workbench/models/data}
  [ -n "${CONTINUE:-}" ] && set -- "$@" --start-from "$from/$protein.pt"
  # SAMPLER=1: add as many frames sampled by that model, labelled by the teacher
  [ -n "${SAMPLER:-}" ] && set -- "$@" --sampler "$from/$protein.pt"
  # SAMPLER_START=RUN: the sampler starts from where that run of the model went (checkpoint);
  # RUN1,RUN2,...: from each run's structures in turn (every earlier round's run: a round
  # trained only on the last round's frames reopens the holes the rounds before closed)
  [ -n "${SAMPLER_START:-}" ] && set -- "$@" --sampler-start "$SAMPLER_START"
  [ -n "${SAMPLER_REPLICAS:-}" ] && set -- "$@" --sampler-replicas "$SAMPLER_REPLICAS"
  [ -n "${SAMPLER_STEPS:-}" ] && set -- "$@" --sampler-steps "$SAMPLER_STEPS"
  # SAMPLER_SAVE_EVERY=K, SAMPLER_EQUILIBRATION=S: the sampler's frame interval and the steps
  # before its first frame (defaults 150 and 1000; 10 and 0 keep a model's first picoseconds)
  [ -n "${SAMPLER_SAVE_EVERY:-}" ] && set -- "$@" --sampler-save-every "$SAMPLER_SAVE_EVERY"
  [ -n "${SAMPLER_EQUILIBRATION:-}" ] && set -- "$@" --sampler-equilibration "$SAMPLER_EQUILIBRATION"
  # SAMPLER_MAX_FORCE=F: leave out sampled frames with a teacher force above F (default 1000)
  [ -n "${SAMPLER_MAX_FORCE:-}" ] && set -- "$@" --sampler-max-force "$SAMPLER_MAX_FORCE"
  # SELECT_EVERY=K: keep the epoch whose short run (SELECT_STEPS) is closest to the
  # teacher's, scored every K epochs: by folded fraction, or with SELECT_BY=ensemble by
  # both long-run criteria (folded fraction and Q overlap)
  [ -n "${SELECT_EVERY:-}" ] && set -- "$@" --select-every "$SELECT_EVERY" \
    --select-steps "${SELECT_STEPS:-25000}" --select-by "${SELECT_BY:-folded}"
  # SELECT_START=RUN: the second half of each selection run starts from that run's
  # checkpoint (a model run that drifted), not from unfolded structures
  [ -n "${SELECT_START:-}" ] && set -- "$@" --select-start "$SELECT_START"
  # COMPACT=0.7,0.8: also frames of the teacher squeezed to these fractions of the native
  # radius of gyration (the over-compact states a network extrapolates into)
  [ -n "${COMPACT:-}" ] && set -- "$@" --compact "$COMPACT"
  # NOISE=0.15,0.3: also copies of NOISE_FRACTION (default 0.1) of the teacher frames with
  # every coordinate displaced by Gaussian noise of these Å, labelled by the teacher
  [ -n "${NOISE:-}" ] && set -- "$@" --noise "$NOISE" --noise-fraction "${NOISE_FRACTION:-0.1}"
  # COLD=200,250: also teacher frames at these temperatures from native (ordered
  # near-native states, which the teacher's frames from its equilibrium do not reach)
  [ -n "${COLD:-}" ] && set -- "$@" --cold "$COLD"
  # REPULSION=cutoff: the fitted repulsion vanishes beyond 1.25 σ; =edge: beyond σ, the
  # closest approach, so it adds nothing on the data (CONTINUE keeps the priors)
  [ -n "${REPULSION:-}" ] && set -- "$@" --repulsion "$REPULSION"
  # REPULSION_SEPARATION=4: the fitted repulsion also between 1-5 pairs (new priors only)
  [ -n "${REPULSION_SEPARATION:-}" ] && set -- "$@" --repulsion-separation "$REPULSION_SEPARATION"
  # REPULSION_GROUPING=name: pairs of the same bead names share one repulsion σ, a hard
  # core, instead of each pair repelling at its own closest approach (new priors only);
  # =sequence: classes of bead types and residue separation (1-4, 5 and more); =touching:
  # as sequence, but pairs that came within 6.5 Å keep their own closest approach
  [ -n "${REPULSION_GROUPING:-}" ] && set -- "$@" --repulsion-grouping "$REPULSION_GROUPING"
  # DIHEDRAL_DEGREE=1: dihedral priors of one harmonic, one minimum each (new priors only)
  [ -n "${DIHEDRAL_DEGREE:-}" ] && set -- "$@" --dihedral-degree "$DIHEDRAL_DEGREE"
  # REFINE_PRIORS=1: bonds, angles and dihedrals refitted to the teacher's forces after the
  # Boltzmann inversion, so SchNet is left the contacts (new priors only)
  [ -n "${REFINE_PRIORS:-}" ] && set -- "$@" --refine-priors
  # EMBEDDING=bead: a SchNet embedding vector per bead, not per bead type (CONTINUE keeps
  # the model's own)
  [ -n "${EMBEDDING:-}" ] && set -- "$@" --embedding "$EMBEDDING"
  # WIDTH=256: SchNet hidden and filter width (new models only; default 128)
  [ -n "${WIDTH:-}" ] && set -- "$@" --hidden "$WIDTH" --filters "$WIDTH"
  # BLOCKS=1, CUTOFF=8: SchNet interaction blocks and cutoff, Å (new models only; default
  # 3 and 10): a shallower, more local network
  [ -n "${BLOCKS:-}" ] && set -- "$@" --blocks "$BLOCKS"
  [ -n "${CUTOFF:-}" ] && set -- "$@" --cutoff "$CUTOFF"
  # ENERGY_WEIGHT=w: also fit the teacher's energies (less the priors'), weight w Å²/bead
  [ -n "${ENERGY_WEIGHT:-}" ] && set -- "$@" --energy-weight "$ENERGY_WEIGHT"
  # GRAD_CLIP=N: largest gradient norm of an optimiser step (see the log's grad_norm);
  # WEIGHT_AVERAGE=0.999: validate and keep a moving average of the weights
  [ -n "${GRAD_CLIP:-}" ] && set -- "$@" --grad-clip "$GRAD_CLIP"
  [ -n "${WEIGHT_AVERAGE:-}" ] && set -- "$@" --weight-average "$WEIGHT_AVERAGE"
  # TF32=1: optimiser steps with TF32 matrix products (validation stays FP32)
  [ -n "${TF32:-}" ] && set -- "$@" --tf32
  # ENSEMBLE_WEIGHT=w (with SAMPLER=1): the relative-entropy term, the sampler's frames
  # reweighted to the model being trained against the teacher's own frames
  [ -n "${ENSEMBLE_WEIGHT:-}" ] && set -- "$@" --ensemble-weight "$ENSEMBLE_WEIGHT"
  # ONLINE_WALKERS=N (with ENSEMBLE_WEIGHT): the term's model frames from N walkers of the
  # model being trained, run every ONLINE_EVERY optimiser steps for ONLINE_STEPS steps
  # (no sampler frames to reweight; SAMPLER frames are then force-matching frames only);
  # ONLINE_START=RUN[,RUN...]: half of the walkers start from those runs' structures
  [ -n "${ONLINE_WALKERS:-}" ] && set -- "$@" --online-walkers "$ONLINE_WALKERS" \
    --online-every "${ONLINE_EVERY:-50}" --online-steps "${ONLINE_STEPS:-1000}"
  [ -n "${ONLINE_START:-}" ] && set -- "$@" --online-start "$ONLINE_START"
  # ONLINE_BURN_IN=S: the walkers first run S steps with the starting weights;
  # ONLINE_CONTRASTIVE=1: their frames count equally (no reweighting between runs)
  [ -n "${ONLINE_BURN_IN:-}" ] && set -- "$@" --online-burn-in "$ONLINE_BURN_IN"
  [ -n "${ONLINE_CONTRASTIVE:-}" ] && set -- "$@" --online-contrastive
  # ENSEMBLE_TEMPERATURES=300: only these frames feed it; TEACHER_START=RUN: the teacher's
  # replicas start from a run's checkpoint (with SAMPLER_START, both ensembles equilibrated)
  [ -n "${ENSEMBLE_TEMPERATURES:-}" ] && set -- "$@" --ensemble-temperatures "$ENSEMBLE_TEMPERATURES"
  # ENSEMBLE_CHECK=K: check the reweighted frames' sample fraction every K optimiser steps
  # (default 50; a larger protein's energies reweight its frames within fewer)
  [ -n "${ENSEMBLE_CHECK:-}" ] && set -- "$@" --ensemble-check-every "$ENSEMBLE_CHECK"
  # DATA=DIR: train on DIR/<protein>.data.pt (a SAVE_DATA=1 call's) instead of generating;
  # TEACHER_START then only names the teacher run the check run is validated against
  [ -n "${TEACHER_START:-}" ] && [ -z "${DATA:-}" ] && set -- "$@" --teacher-start "$TEACHER_START"
  [ -n "${SAVE_DATA:-}" ] && set -- "$@" --save-data "$DEST/$protein.data.pt"
  # TEACHER_EQ=STEPS: first run the teacher (64 replicas, a share TEACHER_EQ_DENATURED of
  # them from denatured starts, default 0.5, at most TEACHER_EQ_LIMIT seconds) and start the
  # teacher data from where it ended, as TEACHER_START would; the check run (same starts)
  # is then validated against it
  if [ -n "${TEACHER_EQ:-}" ]; then
    if [ -n "${TEACHER_START:-}" ]; then
      echo "error: give TEACHER_START or TEACHER_EQ, not both" >&2
      return 2
    fi
    local variant=teacher
    [ -n "${EPSILON:-}" ] && variant="$variant,eps=$EPSILON"
    [ -n "${CONTACT_BARRIER:-}" ] && variant="$variant,barrier=$CONTACT_BARRIER"
    [ -n "${CONTACT_SEPARATION:-}" ] && variant="$variant,separation=$CONTACT_SEPARATION"
    timeout -s INT "${TEACHER_EQ_LIMIT:-300}" python -m workbench.cli run --protein "$protein" \
      --model "${variant/teacher,/teacher:}" --replicas 64 --steps "$TEACHER_EQ" \
      --kernels cuda_graph --save-interval 2500 --no-trajectory \
      --denatured-fraction "${TEACHER_EQ_DENATURED:-0.5}" --out "$DEST/$protein-teacher" \
      --quiet > "$DEST/$protein-teacher.out" 2>&1
    echo "$protein teacher run finished with exit code $?"
    pack
    set -- "$@" --teacher-start "$DEST/$protein-teacher"
  fi
  # EPSILON=E, CONTACT_BARRIER=B, CONTACT_SEPARATION=S: a teacher variant (see
  # scripts/teacher_scan.sh) instead of the calibrated teacher of TEACHER_EPSILON
  [ -n "${EPSILON:-}" ] && set -- "$@" --epsilon "$EPSILON"
  [ -n "${CONTACT_BARRIER:-}" ] && set -- "$@" --contact-barrier "$CONTACT_BARRIER"
  [ -n "${CONTACT_SEPARATION:-}" ] && set -- "$@" --contact-separation "$CONTACT_SEPARATION"
  if [ -n "${DATA:-}" ]; then
    set -- "$@" --data "$DATA/$protein.data.pt"
  else
    set -- "$@" --generate --temperatures "${TEMPERATURES:-300,330,360}"
  fi
  # replicas per temperature and steps of the teacher runs, or with DATA of the sampler's
  set -- "$@" --replicas "${REPLICAS:-96}" --steps 12000 --save-every 150 --equilibration 1000
  timeout "${TIMEOUT:-575}" python -m workbench.cli train --protein "$protein" \
    --epochs 100 --batch-size "${BATCH:-32}" \
    --lr "${LR:-1e-3}" --patience 8 --time-limit "$limit" --wall-limit "${WALL:-540}" \
    --seed 0 --device cuda --quiet --out "$DEST" "$@" \
    > "$DEST/$protein.out" 2>&1
  echo "$protein finished with exit code $?"
  pack
  # RELAX=T1,T2,...: then run the new model from TEACHER_START's ends (64 replicas, ps):
  # its Q and folded fraction against the teacher's own from there (docs/models.md,
  # twenty-fourth session) show within ~100 ps whether its ensemble drifts off the teacher's
  if [ -n "${RELAX:-}" ] && [ -n "${TEACHER_START:-}" ] && [ -f "$DEST/$protein.pt" ]; then
    python scripts/relax_from_run.py "$TEACHER_START" --protein "$protein" \
      --model "$DEST/$protein.pt" --replicas 64 --times "$RELAX" --device cuda \
      --out "$DEST/$protein-relax.json" > "$DEST/$protein-relax.out" 2>&1
    cat "$DEST/$protein-relax.out"
  fi
  # CHECK=S: then run the new model for S seconds (64 replicas from native, fastest path):
  # its metrics and checkpoint ($DEST/<protein>-check/) feed `workbench validate --runs`
  # and the next round's SAMPLER_START; CHECK_DENATURED=F starts that fraction denatured
  # (default: TEACHER_EQ_DENATURED with TEACHER_EQ, else 0)
  if [ -n "${CHECK:-}" ] && [ -f "$DEST/$protein.pt" ]; then
    local denatured=${CHECK_DENATURED:-0}
    [ -n "${TEACHER_EQ:-}" ] && denatured=${CHECK_DENATURED:-${TEACHER_EQ_DENATURED:-0.5}}
    timeout -s INT "$CHECK" python -m workbench.cli run --protein "$protein" \
      --model "$DEST/$protein.pt" --replicas 64 --steps 100000000 --kernels tables+graph \
      --save-interval 2500 --no-trajectory --denatured-fraction "$denatured" \
      --out "$DEST/$protein-check" --quiet \
      > "$DEST/$protein-check.out" 2>&1
    echo "$protein check run: $(($(wc -l < "$DEST/$protein-check/metrics.csv") / 64)) saves"
    # the teacher run it is validated against: TEACHER_EQ's, or TEACHER_START's where that
    # folder holds the run's metrics (uncompressed)
    local teacher_run=${TEACHER_START:-$DEST/$protein-teacher}
    if [ -f "$teacher_run/metrics.csv" ]; then
      python -m workbench.cli validate --model "$DEST/$protein.pt" --runs \
        "$DEST/$protein-check" "$teacher_run" --plot "$DEST/$protein.long_run.png" \
        > "$DEST/$protein-validate.out" 2>&1
      grep -E "Q overlap|folded|events|verdict" "$DEST/$protein-validate.out"
    fi
  fi
}
nvidia-smi --query-gpu=name --format=csv,noheader
for protein in ${PROTEINS:-cln025 2jof 1yrf 1enh 2a3d}; do
  case $protein in
    cln025|2jof) train "$protein" "${LIMIT_SMALL:-380}" & ;;
    *) train "$protein" "${LIMIT_LARGE:-360}" & ;;
  esac
done
wait
tail -n 9 "$DEST"/*.out
pack  # the data stay on the machine
