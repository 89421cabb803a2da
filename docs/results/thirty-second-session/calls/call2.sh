#!/usr/bin/env bash
set -u
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
lr() {  # gpu, model, run folder, name
  (CUDA_VISIBLE_DEVICES=$1 timeout -s INT 470 python -m workbench.cli run --protein 2a3d \
    --model $2 --replicas 64 --steps 100000000 --kernels tables+graph --save-interval 2500 \
    --no-trajectory --out $3 --resume --quiet; echo "exit $?"
   tar -C $(dirname $3) -cf $OUT/$4.tar $(basename $3)) > $OUT/$4.log 2>&1
}
lr 0 /tmp/j/2a3d.pt /tmp/j/2a3d-check j &
lr 1 /tmp/k/2a3d.pt /tmp/k/2a3d-check k &
lr 2 workbench/models/data/2a3d.pt /tmp/hl hl &
T3=docs/results/2a3d-nineteenth-session/teacher
CUDA_VISIBLE_DEVICES=3 env EMBEDDING=bead NOISE=0.1,0.2 NOISE_FRACTION=0.1 SAMPLER_MAX_FORCE=300 ENERGY_WEIGHT=1 TF32=1 TEMPERATURES=300,360,420,500 REPLICAS=192 BATCH=128 REPULSION=edge CONTINUE=1 PROTEINS=2a3d TEACHER_START=$T3 DATA=/tmp/j FROM=/tmp/j WALL=400 TIMEOUT=420 LIMIT_LARGE=400 CHECK=60 DEST=/tmp/m OUT=$OUT/m bash scripts/train_models.sh > $OUT/m.log 2>&1 &
wait
tail -n 12 $OUT/*.log
