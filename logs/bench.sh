#!/bin/bash
# Session-2 benchmarks (run after training, alone on the machine).
.venv/bin/python -m poss_core.bench --preset smollm2-135m --methods ar,eagle,poss2,poss3,matched \
    --data ../shared/data/eval/*.jsonl --limit 3 --max-new-tokens 64 --runs 1 --depth 6 --top-k 10 --tree-budget 60 \
    --threads 2 --out results/s2-paper > logs/bench_paper.log 2>&1
.venv/bin/python -m poss_core.bench --preset smollm2-135m --methods ar,eagle,poss2,poss3 \
    --data ../shared/data/eval/*.jsonl --limit 2 --max-new-tokens 64 --runs 2 --tree-budget auto \
    --threads 2 --out results/s2-auto > logs/bench_auto.log 2>&1
