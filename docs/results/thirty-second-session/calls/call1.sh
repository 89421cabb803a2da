#!/usr/bin/env bash
# session 32, call 1: 2A3D h continued at two learning rates (j, k), h's check run
# resumed as its long run (hl), the 2A3D teacher run extended (t3); one job per GPU
set -u
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
T3=docs/results/2a3d-nineteenth-session/teacher; gunzip -kf $T3/metrics.csv.gz
R="EMBEDDING=bead NOISE=0.1,0.2 NOISE_FRACTION=0.1 SAMPLER_MAX_FORCE=300 ENERGY_WEIGHT=1
 TF32=1 TEMPERATURES=300,360,420,500 REPLICAS=192 BATCH=128 REPULSION=edge CONTINUE=1
 PROTEINS=2a3d TEACHER_START=$T3 WALL=420 TIMEOUT=440 LIMIT_LARGE=400 CHECK=110"
CUDA_VISIBLE_DEVICES=0 env $R SAVE_DATA=1 DEST=/tmp/j OUT=$OUT/j bash scripts/train_models.sh > $OUT/j.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 env $R LR=3e-4 DEST=/tmp/k OUT=$OUT/k bash scripts/train_models.sh > $OUT/k.log 2>&1 &
H=docs/results/thirty-first-session/h/2a3d-check
mkdir -p /tmp/hl && cp $H/checkpoint.pt /tmp/hl/ && gunzip -c $H/metrics.csv.gz > /tmp/hl/metrics.csv
(CUDA_VISIBLE_DEVICES=2 timeout -s INT 520 python -m workbench.cli run --protein 2a3d \
  --model workbench/models/data/2a3d.pt --replicas 64 --steps 100000000 --kernels tables+graph \
  --save-interval 2500 --no-trajectory --out /tmp/hl --resume --quiet; echo "exit $?"
 tar -C /tmp -cf $OUT/hl.tar hl) > $OUT/hl.log 2>&1 &
mkdir -p /tmp/t3 && cp $T3/checkpoint.pt /tmp/t3/ && gunzip -c $T3/metrics.csv.gz > /tmp/t3/metrics.csv
(CUDA_VISIBLE_DEVICES=3 timeout -s INT 500 python -m workbench.cli run --protein 2a3d \
  --model teacher --replicas 64 --steps 375000 --kernels cuda_graph --save-interval 2500 \
  --no-trajectory --out /tmp/t3 --resume --quiet; echo "exit $?"
 tar -C /tmp -cf $OUT/t3.tar t3) > $OUT/t3.log 2>&1 &
wait
tail -n 12 $OUT/*.log
