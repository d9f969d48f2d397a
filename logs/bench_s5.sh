#!/bin/bash
# The benchmarks of sessions 5 and 6, one after another on a quiet machine: the paper's settings, then bf16 with
# `--tree-budget auto`. DRAFTS (first argument): the folder of drafts to measure (the bundled ones by default);
# TAG (second argument): results/TAG-paper and results/TAG-auto-bf16 (s5 by default; s6 after verification stopped
# putting every tree slot through the LM head). A later session sets PAPER_METHODS, AUTO_METHODS and ONLY (paper or
# auto: run just that one) through logs/bench_s9.sh and logs/bench_stage.sh; AUTO_ARGS adds to the auto command and
# AUTO_SUFFIX to its output folder's name (session 13: AUTO_ARGS="--depth-stop 0" AUTO_SUFFIX=-nostop); AUTO_MAX_NEW sets
# its --max-new-tokens (64 by default; session 17 ran the CLI's default, 256, with AUTO_SUFFIX=-256). PAPER_LIMIT sets
# the paper run's questions per dataset (3 by default) and PAPER_SUFFIX its output folder's suffix (session 18:
# PAPER_LIMIT=10 PAPER_SUFFIX=-10q).
export PYTHONPATH=.
PY=.venv/bin/python
export POSS_DRAFTS_DIR=${1:-assets/drafts/smollm2-135m}
TAG=${2:-s5}
if [ "${ONLY:-paper}" = paper ]; then
$PY -m poss_core.bench --preset smollm2-135m --methods ${PAPER_METHODS:-ar,eagle,poss2,poss3,matched} \
    --data ../shared/data/eval/*.jsonl \
    --limit ${PAPER_LIMIT:-3} --max-new-tokens 64 --runs 1 --depth 6 --top-k 10 --tree-budget 60 --threads 2 \
    --out results/$TAG-paper${PAPER_SUFFIX:-} > logs/$TAG-paper${PAPER_SUFFIX:-}.log 2>&1
fi
if [ "${ONLY:-auto}" = auto ]; then
$PY -m poss_core.bench --preset smollm2-135m --methods ${AUTO_METHODS:-ar,ar-float32,eagle,poss2,poss3} \
    --data ../shared/data/eval/*.jsonl \
    --limit 2 --max-new-tokens ${AUTO_MAX_NEW:-64} --runs 2 --tree-budget auto --threads 2 --dtype bfloat16 --remeasure ${AUTO_ARGS:-} \
    --out results/$TAG-auto-bf16${AUTO_SUFFIX:-} > logs/$TAG-auto-bf16${AUTO_SUFFIX:-}.log 2>&1
fi
