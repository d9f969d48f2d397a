#!/bin/bash
# Twelfth session: 3,072 more prompts the target writes itself (Magpie, seed 8), answered greedily in bf16: the held-out
# gap (training batches top-1 0.73 at the end of a stage against 0.66 on the held-out slice of the same prompts and
# 0.57 on self-written ones) says the drafts are short of data, not of steps. Greedy answers because the benchmark's
# goals are at temperature 0 (the earlier self-written folders answered at 0.6). Resumable (self_prompts.jsonl and the
# token files); the token ids are then copied to assets/training_data/smollm2-135m-self3.
cd "$(dirname "$0")/.."
PYTHONPATH=. .venv/bin/python -m poss_core.training.data --preset smollm2-135m --self-prompts 3072 --batch-size 64 \
  --max-new-tokens 192 --temperature 0 --dtype bfloat16 --seed 8 --out data/smollm2-135m-self3 \
  --exclude data/smollm2-135m-self data/smollm2-135m-self2 data/smollm2-135m-selfeval
