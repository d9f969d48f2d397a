#!/bin/bash
# Stage 7 (started at the end of session 8, resumable: checkpoints every 100 steps; rerun the same line to resume).
# logs/probe_s8_long.sh showed the single EAGLE layer still gains 3-4 held-out points per ~2,400 steps, so:
#   a) EAGLE and the matched control continue 4,000 steps from the bundled stage-6 drafts (batch order 10, one
#      thread each, side by side);
#   b) POSS-2 and POSS-3 restart from that EAGLE layer for 300 steps with the decoding unroll (batch order 11), one at a
#      time on 2 threads; EAGLE and the matched control take the same 300 steps.
# Every draft then has 9,600 steps (POSS: 9,300 as EAGLE + 300 as POSS).
export PYTHONPATH=.
DATA="--preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers data/smollm2-135m-bf16 \
 data/smollm2-135m-self data/smollm2-135m-self2 --tokens-per-batch 1024 --draft-vocab 8192 --lr 5e-4 \
 --autocast bfloat16 --save-every 100"
train() {  # train <log> <args...>
  local log=$1; shift
  .venv/bin/python -m poss_core.training.train $DATA "$@" >> "$log" 2>&1
}
A="--init-from assets/drafts/smollm2-135m --steps 4000 --batch-seed 10 --threads 1 --export runs/s9a-export"
B="--steps 300 --batch-seed 11 --export runs/s9-export"
case "$1" in
  a-eagle) train logs/s9a-eagle.log $A --methods eagle --out runs/s9a-eagle ;;
  a-matched) train logs/s9a-matched.log $A --methods matched --out runs/s9a-matched ;;
  b-teacher) train logs/s9b-eagle.log $B --init-from runs/s9a-export --methods eagle --threads 1 --out runs/s9b-eagle && \
             train logs/s9b-matched.log $B --init-from runs/s9a-export --methods matched --threads 1 --out runs/s9b-matched ;;
  b-poss) train logs/s9b-$2.log $B --specialists-from runs/s9a-export --unroll decoding --methods $2 --threads 2 \
              --out runs/s9b-$2 ;;
  *) echo "usage: $0 a-eagle|a-matched|b-teacher|b-poss poss2|poss3" >&2; exit 2 ;;
esac
