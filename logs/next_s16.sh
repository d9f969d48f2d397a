#!/bin/bash
# Stage 13 (session 15): logs/data_s16.sh's self-written answers (resumes, or only checks once done; its token ids are
# in assets/training_data/smollm2-135m-self5, so on a fresh machine run logs/rebuild_data.sh first), then stage 13
# (logs/train_s16.sh) by logs/chain_stage.sh; logs/after_s16.sh PID benchmarks and scores it:
#   nohup bash logs/next_s16.sh > logs/chain_s16.log 2>&1 & nohup bash logs/after_s16.sh $! > logs/after_s16.log 2>&1 &
set -e
cd "$(dirname "$0")/.."
bash logs/data_s16.sh
exec bash logs/chain_stage.sh logs/train_s16.sh "stage 13"
