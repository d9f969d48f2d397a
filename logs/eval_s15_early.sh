#!/bin/bash
# Session 15: stage 12's held-out scores for the drafts already trained while POSS-3's b-phase still runs (one
# thread each, on the core training leaves free); POSS-3 is scored afterwards with METHODS=poss3 SUFFIX=-poss3.
# The same slices and settings as logs/eval_stage.sh.
export PYTHONPATH=.
M=${METHODS:-eagle,poss2,matched} S=${SUFFIX:-} TH=${THREADS:-1}
.venv/bin/python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-selfeval --threads $TH \
    --drafts runs/s15a-export runs/s15-export --methods $M \
    --unroll decoding --out results/s15-selfeval-decoding$S.json > logs/s15-selfeval-decoding$S.log 2>&1
.venv/bin/python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-longeval --threads $TH \
    --drafts runs/s15a-export runs/s15-export --methods $M --unroll decoding --max-len 1024 --batch-size 1 \
    --out results/s15-longeval$S.json > logs/s15-longeval$S.log 2>&1
