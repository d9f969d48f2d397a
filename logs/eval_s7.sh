#!/bin/bash
# Session-7 offline evaluation: the stage-5 drafts (runs/s7-export) beside the bundled stage-4 ones, on the 64 held-out
# self-written answers (never eval/), decoding unroll (how the drafts run at inference). Run on a quiet machine.
export PYTHONPATH=.
.venv/bin/python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-selfeval --threads 2 \
    --drafts assets/drafts/smollm2-135m runs/s7-export --methods eagle,poss2,poss3,matched \
    --unroll decoding --out results/s7-selfeval-decoding.json > logs/s7-selfeval-decoding.log 2>&1
