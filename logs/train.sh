#!/bin/bash
# Session-2 training: two single-thread processes (2 cores), same data/steps/init for every method.
S=${1:-2400}
COMMON="--preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers data/smollm2-135m-bf16 --steps $S --tokens-per-batch 1024 --draft-vocab 8192 --lr 1e-3 --autocast bfloat16 --threads 1 --save-every 100 --export assets/drafts/smollm2-135m"
nohup .venv/bin/python -m poss_core.training.train $COMMON --methods eagle,poss2 --out runs/s2a > logs/train_a.log 2>&1 &
nohup .venv/bin/python -m poss_core.training.train $COMMON --methods matched,poss3 --out runs/s2b > logs/train_b.log 2>&1 &
