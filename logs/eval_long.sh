#!/bin/bash
# Draft accuracy over long documents: the 48 held-out summaries of data/smollm2-135m-longeval (logs/data_s12_long.sh;
# never trained on, never eval/), whole (up to 1,792 tokens), one per batch, predicted unroll (a decoding unroll over
# 1,700-token rows needs a 10k x 10k mask per head). Usage: bash logs/eval_long.sh TAG DRAFT_FOLDER...
export PYTHONPATH=.
tag=$1; shift
.venv/bin/python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-longeval --threads 2 \
    --drafts "$@" --methods eagle,poss2,poss3,matched --unroll predicted --max-len 1792 --batch-size 1 \
    --out results/${tag}-longeval.json > logs/${tag}-longeval.log 2>&1
