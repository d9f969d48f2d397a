#!/bin/bash
# Session-6 training: POSS-3 started the paper's way, every specialist a copy of the stage-3 EAGLE layer
# (runs/s4-export/eagle, the stage-3 export), then the same 300 steps, batches and decoding unroll as the bundled
# from-EAGLE POSS-2 (logs/train_s5.sh from-eagle-poss2). Its EAGLE control is stage 4's bundled EAGLE (the same 300
# steps, batch seed 6, from the same layer). Run alone: a decoding-unroll training peaks near 12 GB.
COMMON="--preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers data/smollm2-135m-bf16 \
 data/smollm2-135m-self data/smollm2-135m-self2 --specialists-from runs/s4-export --steps 300 \
 --tokens-per-batch 1024 --draft-vocab 8192 --lr 5e-4 --autocast bfloat16 --threads 2 --save-every 25 \
 --batch-seed 6 --unroll decoding --export runs/s6-export-fe"
PYTHONPATH=. .venv/bin/python -m poss_core.training.train $COMMON --methods poss3 --out runs/s6-fe-poss3 "$@" \
  > logs/s6-fe-poss3.log 2>&1
