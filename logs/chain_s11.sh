#!/bin/bash
# Session 11: the whole of stage 8 (logs/train_s11.sh), each run started as the CPU and memory free
# up (~7 GB per teacher-forced run, ~12 GB per decoding-unroll POSS run, 24 GB in all; never two POSS runs together):
# the rebuilt features first (logs/rebuild_data.sh), then EAGLE and the matched control side by side; POSS-2 (one
# thread) once EAGLE is exported; EAGLE's and the matched control's 300 b-steps (one thread) once the matched control
# is; POSS-3 (two threads) after POSS-2.
cd "$(dirname "$0")/.."
while pgrep -f rebuild_data.sh > /dev/null; do sleep 20; done
[ -f data/.rebuilt ] || { echo "the training data is incomplete: run logs/rebuild_data.sh first" >&2; exit 1; }
bash logs/train_s11.sh a-eagle & eagle=$!
bash logs/train_s11.sh a-matched & matched=$!
wait $eagle
POSS_THREADS=1 bash logs/train_s11.sh b-poss poss2 & poss2=$!
wait $matched
bash logs/train_s11.sh b-teacher &
wait $poss2
bash logs/train_s11.sh b-poss poss3
wait
echo "stage 8 done $(date)"
