#!/bin/bash
# Session-4 measurements, one after another on a quiet machine (stage-3 drafts already copied into assets/).
export PYTHONPATH=.
PY=.venv/bin/python
$PY -m poss_core.bench --preset smollm2-135m --methods ar,ar-float32,eagle,poss2,poss3 --data ../shared/data/eval/*.jsonl \
    --limit 2 --max-new-tokens 64 --runs 2 --tree-budget auto --threads 2 --dtype bfloat16 --out results/s4-auto-bf16 \
    > logs/s4-auto-bf16.log 2>&1
$PY -m poss_core.bench --preset smollm2-135m --methods ar,eagle,poss2,poss3,matched --data ../shared/data/eval/*.jsonl \
    --limit 3 --max-new-tokens 64 --runs 1 --depth 6 --top-k 10 --tree-budget 60 --threads 2 --out results/s4-paper \
    > logs/s4-paper.log 2>&1
$PY -m poss_core.bench --preset smollm2-135m --methods ar,eagle,poss2,poss3 --data ../shared/data/eval/*.jsonl \
    --limit 2 --max-new-tokens 64 --runs 2 --tree-budget auto --threads 2 --out results/s4-auto > logs/s4-auto.log 2>&1
