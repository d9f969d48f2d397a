#!/bin/bash
# Session 11: once stage 8 is trained (logs/chain_s11.sh, whose process id is the first argument), score it on the
# held-out slice, then benchmark it at the paper's settings and with --tree-budget auto, one at a time on the quiet
# machine.
cd "$(dirname "$0")/.."
while kill -0 "$1" 2>/dev/null; do sleep 30; done
[ -f runs/s11-export/poss3/config.json ] || { echo "stage 8 is incomplete: runs/s11-export/poss3 is missing" >&2; exit 1; }
bash logs/eval_s11.sh; echo "eval done $(date)"
bash logs/bench_s11.sh paper; echo "paper done $(date)"
bash logs/bench_s11.sh auto; echo "auto done $(date)"
