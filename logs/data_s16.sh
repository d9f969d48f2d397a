#!/bin/bash
# Fifteenth session: 3,072 more prompts the target writes itself (Magpie, seed 13), answered greedily in bf16, for
# stage 13: stage 12 (logs/data_s15.sh's 3,065 such answers added to stage 11's data) raised every draft at every
# position on both held-out slices (EAGLE k=6 .447 -> .457, POSS-2 .469 -> .482), so data is still the lever.
# Resumable (self_prompts.jsonl and the token files); the token ids are then copied to
# assets/training_data/smollm2-135m-self5 (logs/rebuild_data.sh rebuilds the features from them).
set -e
cd "$(dirname "$0")/.."
PYTHONPATH=. .venv/bin/python -m poss_core.training.data --preset smollm2-135m --self-prompts 3072 --batch-size 64 \
  --max-new-tokens 192 --temperature 0 --dtype bfloat16 --seed 13 --out data/smollm2-135m-self5 \
  --exclude data/smollm2-135m-self data/smollm2-135m-self2 data/smollm2-135m-self3 data/smollm2-135m-self4 data/smollm2-135m-selfeval
# Copied once: a rebuild from the committed ids (logs/rebuild_data.sh) leaves the committed folder as it is.
[ -d assets/training_data/smollm2-135m-self5 ] || { mkdir -p assets/training_data/smollm2-135m-self5 && cp -r \
  data/smollm2-135m-self5/tokens data/smollm2-135m-self5/self_prompts.jsonl data/smollm2-135m-self5/data_card.json \
  assets/training_data/smollm2-135m-self5/; }
