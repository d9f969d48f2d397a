#!/bin/bash
# Session-9 offline evaluation: stage 7 (runs/s9-export) and its 9,300-step EAGLE (runs/s9a-export), scored like
# stage 6 (logs/eval_s8.sh, results/s8-selfeval-decoding.json) on the 64 held-out self-written answers (never eval/),
# decoding unroll. Quiet machine.
export PYTHONPATH=.
.venv/bin/python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-selfeval --threads 2 \
    --drafts runs/s9a-export runs/s9-export --methods eagle,poss2,poss3,matched \
    --unroll decoding --out results/s9-selfeval-decoding.json > logs/s9-selfeval-decoding.log 2>&1
