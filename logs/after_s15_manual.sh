#!/bin/bash
# Session 15: stage 12's remaining measurements, ordered around logs/eval_s15_early.sh (started while POSS-3 trained):
# the paper-settings benchmark as soon as POSS-3 is exported (τ does not depend on timing), the held-out scores of
# POSS-3 once the early scoring is done, then the two timed `auto` benchmarks on the quiet machine.
cd "$(dirname "$0")/.."
until [ -f runs/s15-export/poss3/config.json ]; do sleep 20; done
bash logs/bench_stage.sh s15 paper; echo "paper done $(date)"
while pgrep -f eval_s15_early.sh > /dev/null; do sleep 20; done
METHODS=poss3 SUFFIX=-poss3 THREADS=2 bash logs/eval_s15_early.sh; echo "poss3 eval done $(date)"
bash logs/bench_stage.sh s15 auto; echo "auto done $(date)"
AUTO_ARGS="--depth-stop 0" AUTO_SUFFIX=-nostop bash logs/bench_stage.sh s15 auto; echo "auto without a depth stop done $(date)"
