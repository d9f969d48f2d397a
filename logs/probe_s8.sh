#!/bin/bash
# Session-8 probe: which loss weighting trains the single EAGLE layer best? Each variant continues the bundled
# (stage-5) EAGLE for 300 steps on the same data and batches (--batch-seed 8, a fresh order), teacher-forced,
# then all are scored on the 64 held-out self-written answers (never eval/), decoding unroll.
export PYTHONPATH=.
COMMON="--preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers data/smollm2-135m-bf16 \
 data/smollm2-135m-self data/smollm2-135m-self2 --init-from assets/drafts/smollm2-135m --steps 300 \
 --tokens-per-batch 1024 --draft-vocab 8192 --lr 5e-4 --autocast bfloat16 --threads 2 --batch-seed 8 --methods eagle"
for loss in "$@"; do
  .venv/bin/python -m poss_core.training.train $COMMON --loss $loss --export runs/s8-probe-$loss \
      --out runs/s8-probe-$loss-run > logs/s8-probe-$loss.log 2>&1 || exit 1
done
.venv/bin/python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-selfeval --threads 2 \
    --drafts assets/drafts/smollm2-135m $(for l in "$@"; do echo runs/s8-probe-$l; done) --methods eagle \
    --unroll decoding --out results/s8-probe.json > logs/s8-probe-eval.log 2>&1
