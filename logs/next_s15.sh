#!/bin/bash
# Stage 12 (session 14): logs/data_s15.sh's self-written answers (resumes, or only checks once done; its token ids are
# in assets/training_data/smollm2-135m-self4, so on a fresh machine run logs/rebuild_data.sh first), then stage 12
# (logs/train_s15.sh) by logs/chain_stage.sh; logs/after_s15.sh PID benchmarks and scores it:
#   nohup bash logs/next_s15.sh > logs/chain_s15.log 2>&1 & nohup bash logs/after_s15.sh $! > logs/after_s15.log 2>&1 &
set -e
cd "$(dirname "$0")/.."
bash logs/data_s15.sh
exec bash logs/chain_stage.sh logs/train_s15.sh "stage 12"
