#!/bin/bash
# Once a stage is trained (its chain's process id is the first argument), benchmark it at the paper's settings and
# with --tree-budget auto (logs/bench_stage.sh TAG), then score it on the held-out slices (logs/eval_stage.sh TAG), one at a
# time on the quiet machine. Usage: logs/after_stage.sh PID TAG NAME (after_s11.sh and after_s13.sh wrap it):
#   nohup bash logs/chain_s13.sh > logs/chain_s13.log 2>&1 & nohup bash logs/after_s13.sh $! > logs/after_s13.log 2>&1 &
pid=$1 tag=$2 name=${3:-the stage}
cd "$(dirname "$0")/.."
while kill -0 "$pid" 2>/dev/null; do sleep 30; done
[ -f runs/$tag-export/poss3/config.json ] || { echo "$name is incomplete: runs/$tag-export/poss3 is missing" >&2; exit 1; }
# The benchmarks first (the issues' goals), the held-out scores last (session 13's order).
bash logs/bench_stage.sh $tag paper; echo "paper done $(date)"
bash logs/bench_stage.sh $tag auto; echo "auto done $(date)"
# The same without the dynamic depth stop `auto` may choose (session 13), for the comparison on the same drafts.
AUTO_ARGS="--depth-stop 0" AUTO_SUFFIX=-nostop bash logs/bench_stage.sh $tag auto; echo "auto without a depth stop done $(date)"
bash logs/eval_stage.sh $tag; echo "eval done $(date)"
