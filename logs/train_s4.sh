#!/bin/bash
# Session-4 training (stage 3): every bundled stage-2 draft continues 600 steps on all the data, two single-thread
# processes side by side (2 cores), same data, batches and steps for every method.
COMMON="--preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers data/smollm2-135m-bf16 \
 data/smollm2-135m-self data/smollm2-135m-self2 --init-from assets/drafts/smollm2-135m --steps 600 \
 --tokens-per-batch 1024 --draft-vocab 8192 --lr 5e-4 --autocast bfloat16 --threads 1 --save-every 100 \
 --export runs/s4-export"
PYTHONPATH=. nohup .venv/bin/python -m poss_core.training.train $COMMON --methods eagle,poss2 --out runs/s4a > logs/s4a.log 2>&1 &
PYTHONPATH=. nohup .venv/bin/python -m poss_core.training.train $COMMON --methods matched,poss3 --out runs/s4b > logs/s4b.log 2>&1 &
