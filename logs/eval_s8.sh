#!/bin/bash
# Session-8 offline evaluation: stage 6 (runs/s8-export) and its 5,000-step EAGLE (runs/s8a-export) beside the
# bundled stage-5 drafts (scored by logs/eval_s7.sh on the same slice, results/s7-selfeval-decoding.json), on the 64 held-out self-written answers (never eval/), decoding unroll. Quiet machine.
export PYTHONPATH=.
.venv/bin/python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-selfeval --threads 2 \
    --drafts runs/s8a-export runs/s8-export --methods eagle,poss2,poss3,matched \
    --unroll decoding --out results/s8-selfeval-decoding.json > logs/s8-selfeval-decoding.log 2>&1
