#!/bin/bash
# Session 12: once stage 9 is trained (logs/chain_s12.sh, whose process id is the first argument) and the long
# documents are answered (logs/data_s12_long.sh), start stage 10 (logs/chain_s13.sh, from runs/s12-export) and score
# stage 9 on the held-out slices beside it (top-1 agreement does not depend on the machine's speed).
cd "$(dirname "$0")/.."
while kill -0 "$1" 2>/dev/null; do sleep 20; done
[ -f runs/s12-export/poss3/config.json ] || { echo "stage 9 is incomplete: runs/s12-export/poss3 is missing" >&2; exit 1; }
while [ ! -f data/smollm2-135m-long/data_card.json ]; do sleep 20; done
nohup bash logs/chain_s13.sh > logs/chain_s13.log 2>&1 &
echo "stage 10 started $(date)"
bash logs/eval_s12.sh; echo "eval s12 done $(date)"
bash logs/eval_long.sh s12 runs/s12a-export runs/s12-export; echo "long eval s12 done $(date)"
bash logs/bench_s12.sh paper; echo "paper s12 done $(date)"
