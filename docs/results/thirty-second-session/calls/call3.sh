#!/usr/bin/env bash
set -u
export PYTHONPATH=.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
lr() {  # gpu, model, run folder, name
  (CUDA_VISIBLE_DEVICES=$1 timeout -s INT 350 python -m workbench.cli run --protein 2a3d \
    --model $2 --replicas 64 --steps 100000000 --kernels tables+graph --save-interval 2500 \
    --no-trajectory --out $3 --resume --quiet; echo "exit $?"
   tar -C $(dirname $3) -cf $OUT/$4.tar $(basename $3)) > $OUT/$4.log 2>&1
}
lr 0 /tmp/j/2a3d.pt /tmp/j/2a3d-check j &
lr 1 /tmp/k/2a3d.pt /tmp/k/2a3d-check k &
lr 2 workbench/models/data/2a3d.pt /tmp/hl hl &
lr 3 /tmp/m/2a3d.pt /tmp/m/2a3d-check m &
wait
tail -n 12 $OUT/*.log
