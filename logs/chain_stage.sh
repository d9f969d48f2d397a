#!/bin/bash
# One whole stage of the recipe of logs/train_s8.sh, each run started as the CPU and memory free up (~7 GB per
# teacher-forced run, ~12 GB per decoding-unroll POSS run, 24 GB in all; never two POSS runs together): the rebuilt
# features first (logs/rebuild_data.sh), then EAGLE and the matched control side by side; POSS-2 (one thread) once
# EAGLE is exported; EAGLE's and the matched control's 300 b-steps (one thread) once the matched control is; POSS-3
# (two threads) after POSS-2. Usage: logs/chain_stage.sh logs/train_sNN.sh NAME (NAME only labels the closing line).
# Every run resumes from its runs/<out>/<method>/resume.pt, so the same command continues an interrupted stage.
train=$1 name=${2:-stage}
cd "$(dirname "$0")/.."
while pgrep -f rebuild_data.sh > /dev/null; do sleep 20; done
[ -f data/.rebuilt ] || { echo "the training data is incomplete: run logs/rebuild_data.sh first" >&2; exit 1; }
bash "$train" a-eagle & eagle=$!
bash "$train" a-matched & matched=$!
wait $eagle
POSS_THREADS=1 bash "$train" b-poss poss2 & poss2=$!
wait $matched
bash "$train" b-teacher &
wait $poss2
bash "$train" b-poss poss3
wait
echo "$name done $(date)"
