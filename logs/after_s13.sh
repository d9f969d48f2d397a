#!/bin/bash
# Once stage 10 is trained (logs/chain_s13.sh, whose process id is the first argument), score it on both held-out
# slices, then benchmark it at the paper's settings and with --tree-budget auto, one at a time on the quiet machine:
#   nohup bash logs/chain_s13.sh > logs/chain_s13.log 2>&1 & nohup bash logs/after_s13.sh $! > logs/after_s13.log 2>&1 &
cd "$(dirname "$0")/.."
while kill -0 "$1" 2>/dev/null; do sleep 30; done
[ -f runs/s13-export/poss3/config.json ] || { echo "stage 10 is incomplete: runs/s13-export/poss3 is missing" >&2; exit 1; }
bash logs/eval_s13.sh; echo "eval done $(date)"
bash logs/bench_s13.sh paper; echo "paper done $(date)"
bash logs/bench_s13.sh auto; echo "auto done $(date)"
