#!/bin/bash
# Session-8 diagnostic for the next stage: does the single EAGLE layer keep improving with many more teacher-forced
# steps? Continues the stage-6 EAGLE (runs/s8-export) 2,400 steps in one schedule (batch order 10), then scores it
# on the held-out self-written slice (never eval/). Not bundled: the POSS drafts would need the same steps.
export PYTHONPATH=.
.venv/bin/python -m poss_core.training.train --preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers \
    data/smollm2-135m-bf16 data/smollm2-135m-self data/smollm2-135m-self2 --tokens-per-batch 1024 --draft-vocab 8192 \
    --lr 5e-4 --autocast bfloat16 --save-every 200 --init-from runs/s8-export --steps 2400 --batch-seed 10 \
    --threads 2 --methods eagle --export runs/s8-long-export --out runs/s8-long > logs/s8-long-eagle.log 2>&1 && \
.venv/bin/python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-selfeval --threads 2 \
    --drafts runs/s8-long-export --methods eagle --unroll decoding --out results/s8-long.json > logs/s8-long-eval.log 2>&1
