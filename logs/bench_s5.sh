#!/bin/bash
# Session-5 benchmarks, one after another on a quiet machine. DRAFTS: the folder of drafts to measure (given as the
# first argument; the bundled ones by default).
export PYTHONPATH=.
PY=.venv/bin/python
export POSS_DRAFTS_DIR=${1:-assets/drafts/smollm2-135m}
$PY -m poss_core.bench --preset smollm2-135m --methods ar,eagle,poss2,poss3,matched --data ../shared/data/eval/*.jsonl \
    --limit 3 --max-new-tokens 64 --runs 1 --depth 6 --top-k 10 --tree-budget 60 --threads 2 --out results/s5-paper \
    > logs/s5-paper.log 2>&1
$PY -m poss_core.bench --preset smollm2-135m --methods ar,ar-float32,eagle,poss2,poss3 --data ../shared/data/eval/*.jsonl \
    --limit 2 --max-new-tokens 64 --runs 2 --tree-budget auto --threads 2 --dtype bfloat16 --remeasure --out results/s5-auto-bf16 \
    > logs/s5-auto-bf16.log 2>&1
