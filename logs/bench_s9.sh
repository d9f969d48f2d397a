#!/bin/bash
# Session-9 benchmarks of the stage-7 drafts (runs/s9-export), the same settings as logs/bench_s5.sh:
#   bash logs/bench_s9.sh paper ar,eagle,poss2 s9-paper           # the paper's settings (τ and pos-acc do not depend
#                                                                 #  on the machine's speed; POSS-3, matched not in stage 7)
#   bash logs/bench_s9.sh auto                                    # bf16, --tree-budget auto, on a quiet machine
export PYTHONPATH=.
PY=.venv/bin/python
export POSS_DRAFTS_DIR=${DRAFTS:-runs/s9-export}
case "$1" in
  paper) $PY -m poss_core.bench --preset smollm2-135m --methods $2 --data ../shared/data/eval/*.jsonl \
             --limit 3 --max-new-tokens 64 --runs 1 --depth 6 --top-k 10 --tree-budget 60 --threads 2 --out results/$3 \
             > logs/$3.log 2>&1 ;;
  auto) $PY -m poss_core.bench --preset smollm2-135m --methods ar,ar-float32,eagle,poss2 \
            --data ../shared/data/eval/*.jsonl --limit 2 --max-new-tokens 64 --runs 2 --tree-budget auto --threads 2 \
            --dtype bfloat16 --remeasure --out results/s9-auto-bf16 > logs/s9-auto-bf16.log 2>&1 ;;
  *) echo "usage: $0 paper METHODS NAME | auto" >&2; exit 2 ;;
esac
