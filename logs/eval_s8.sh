#!/bin/bash
# Session-8 offline evaluation: stage 6 (runs/s8-export) and its 5,000-step EAGLE (runs/s8a-export) beside the
# bundled stage-5 drafts (scored by logs/eval_s7.sh on the same slice, results/s7-selfeval-decoding.json), on the 64
# held-out self-written answers (never eval/), decoding unroll. Quiet machine. TAG=s9 scores stage 7 the same way
# (logs/eval_s9.sh); drafts a stage lacks are skipped. METHODS, THREADS and SUFFIX (added to the output names) override
# the defaults (logs/eval_s15_early.sh).
export PYTHONPATH=.
T=${TAG:-s8} S=${SUFFIX:-}
.venv/bin/python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-selfeval --threads ${THREADS:-2} \
    --drafts runs/${T}a-export runs/${T}-export --methods ${METHODS:-eagle,poss2,poss3,matched} \
    --unroll decoding --out results/${T}-selfeval-decoding$S.json > logs/${T}-selfeval-decoding$S.log 2>&1
