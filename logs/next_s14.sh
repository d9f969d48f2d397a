#!/bin/bash
# Stage 11 (session 13): the 3,072 greedy Magpie answers (logs/data_s12.sh; generated in session 13 in 32 min, token ids
# in assets/training_data/smollm2-135m-self3, so on a fresh machine logs/rebuild_data.sh rebuilds them and this step
# only checks), their token ids copied to assets/training_data/, then stage 11 (logs/train_s14.sh) by
# logs/chain_stage.sh; logs/after_s14.sh PID then benchmarks it (logs/bench_s14.sh) and scores it (logs/eval_s14.sh):
#   nohup bash logs/next_s14.sh > logs/chain_s14.log 2>&1 & nohup bash logs/after_s14.sh $! > logs/after_s14.log 2>&1 &
set -e
cd "$(dirname "$0")/.."
bash logs/data_s12.sh
mkdir -p assets/training_data/smollm2-135m-self3
cp -r data/smollm2-135m-self3/tokens data/smollm2-135m-self3/self_prompts.jsonl data/smollm2-135m-self3/data_card.json \
  assets/training_data/smollm2-135m-self3/
exec bash logs/chain_stage.sh logs/train_s14.sh "stage 11"
