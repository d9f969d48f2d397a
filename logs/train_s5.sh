#!/bin/bash
# Session-5 training (stage 4): POSS-2 and POSS-3 continue 300 steps from the bundled stage-3 drafts with the
# decoding unroll (HASS's context alignment), two single-thread processes side by side; then EAGLE and the matched
# control get the same 300 steps on the same batches (--batch-seed 6: an order no earlier stage used; the held-out
# split of --seed 0 unchanged).
COMMON="--preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers data/smollm2-135m-bf16 \
 data/smollm2-135m-self data/smollm2-135m-self2 --init-from assets/drafts/smollm2-135m --steps 300 \
 --tokens-per-batch 1024 --draft-vocab 8192 --lr 5e-4 --autocast bfloat16 --threads 1 --save-every 25 \
 --batch-seed 6 --export runs/s5-export"
if [ "$1" = "from-eagle" ]; then
  # Variant: POSS's specialists start as copies of the stage-3 EAGLE layer (the paper's recipe); the EAGLE control
  # for it is the same 300-step continuation as above (runs/s5c), since EAGLE starts from its own layer either way.
  FE="${COMMON/--init-from assets\/drafts\/smollm2-135m/--specialists-from assets/drafts/smollm2-135m}"
  FE="${FE/runs\/s5-export/runs/s5-export-fe}"
  PYTHONPATH=. nohup .venv/bin/python -m poss_core.training.train $FE --unroll decoding --methods poss2 --out runs/s5e > logs/s5e.log 2>&1 &
  PYTHONPATH=. nohup .venv/bin/python -m poss_core.training.train $FE --unroll decoding --methods poss3 --out runs/s5f > logs/s5f.log 2>&1 &
elif [ "$1" = "teacher" ]; then
  PYTHONPATH=. nohup .venv/bin/python -m poss_core.training.train $COMMON --methods eagle --out runs/s5c > logs/s5c.log 2>&1 &
  PYTHONPATH=. nohup .venv/bin/python -m poss_core.training.train $COMMON --methods matched --out runs/s5d > logs/s5d.log 2>&1 &
else
  PYTHONPATH=. nohup .venv/bin/python -m poss_core.training.train $COMMON --unroll decoding --methods poss2 --out runs/s5a > logs/s5a.log 2>&1 &
  PYTHONPATH=. nohup .venv/bin/python -m poss_core.training.train $COMMON --unroll decoding --methods poss3 --out runs/s5b > logs/s5b.log 2>&1 &
fi
