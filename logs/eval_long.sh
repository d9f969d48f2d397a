#!/bin/bash
# Draft accuracy over long documents: the held-out summaries of data/smollm2-135m-longeval (logs/data_s12_long.sh;
# never trained on, never eval/), cut to 1,024 tokens (documents whose prompt alone is longer drop out), one per batch,
# decoding unroll (the predicted unroll is degenerate for the matched control, as on the short slice since session 5;
# a decoding unroll over 1,700-token rows would need a 10k x 10k mask per head).
# Usage: bash logs/eval_long.sh TAG DRAFT_FOLDER... (METHODS, THREADS and SUFFIX as in logs/eval_s8.sh)
export PYTHONPATH=.
tag=$1; shift
.venv/bin/python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-longeval --threads ${THREADS:-2} \
    --drafts "$@" --methods ${METHODS:-eagle,poss2,poss3,matched} --unroll decoding --max-len 1024 --batch-size 1 \
    --out results/${tag}-longeval${SUFFIX:-}.json > logs/${tag}-longeval${SUFFIX:-}.log 2>&1
