#!/bin/bash
# Stage 15's measurements (session 18), as logs/after_stage_overlap.sh does them but with the paper-settings run over
# the first 10 questions of each dataset (60 questions, 70 turns, instead of 18): the earlier stages' 18-question
# figures are read off the same records (`bench report --limit 3`), so the stage table stays comparable. Held-out
# scoring starts as soon as each draft is exported, on the core the training leaves idle.
# Usage: nohup bash logs/after_s18.sh > logs/after_s18.log 2>&1 &
tag=s18
cd "$(dirname "$0")/.."
ready() { for m in "$@"; do [ -f runs/$tag-export/$m/config.json ] || return 1; done; }
until ready eagle matched; do sleep 20; done
(METHODS=eagle,matched THREADS=1 SUFFIX=-teacher bash logs/eval_stage.sh $tag
 until ready poss2; do sleep 20; done
 METHODS=poss2 THREADS=1 SUFFIX=-poss2 bash logs/eval_stage.sh $tag) & early=$!
echo "early scoring started $(date)"
until ready poss3; do sleep 20; done
PAPER_LIMIT=10 PAPER_SUFFIX=-10q bash logs/bench_stage.sh $tag paper
PYTHONPATH=. .venv/bin/python -m poss_core.bench report results/$tag-paper-10q --limit 3 --out results/$tag-paper
echo "paper done $(date)"
wait $early; echo "early scoring done $(date)"
METHODS=poss3 SUFFIX=-poss3 THREADS=2 bash logs/eval_stage.sh $tag; echo "poss3 eval done $(date)"
