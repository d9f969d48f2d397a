#!/bin/bash
# Session-5 offline evaluation of the stage-3 (bundled), stage-4 (runs/s5-export) and from-EAGLE (runs/s5-export-fe)
# drafts on the 64 held-out self-written answers, in both unrolls; one after another on a quiet machine.
export PYTHONPATH=.
PY=.venv/bin/python
for U in predicted decoding; do
  $PY -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-selfeval --threads 2 \
      --drafts assets/drafts/smollm2-135m runs/s5-export runs/s5-export-fe --methods eagle,poss2,poss3,matched \
      --unroll $U --out results/s5-selfeval-$U.json > logs/s5-selfeval-$U.log 2>&1
done
