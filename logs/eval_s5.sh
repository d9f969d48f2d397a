#!/bin/bash
# Session-5 measurements of the stage-4 drafts (runs/s5-export), one after another on a quiet machine.
export PYTHONPATH=.
PY=.venv/bin/python
for U in predicted decoding; do
  $PY -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-selfeval --threads 2 \
      --drafts assets/drafts/smollm2-135m runs/s5-export --methods eagle,poss2,poss3,matched --unroll $U \
      --out results/s5-selfeval-$U.json > logs/s5-selfeval-$U.log 2>&1
done
POSS_DRAFTS_DIR=runs/s5-export $PY -m poss_core.bench --preset smollm2-135m --methods ar,eagle,poss2,poss3,matched \
    --data ../shared/data/eval/*.jsonl --limit 3 --max-new-tokens 64 --runs 1 --depth 6 --top-k 10 --tree-budget 60 \
    --threads 2 --out results/s5-paper > logs/s5-paper.log 2>&1
