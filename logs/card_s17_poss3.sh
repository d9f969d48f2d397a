#!/bin/bash
# Session 17: stage 14's POSS-3 trained without the training log's final held-out read (logs/train_s17.sh skipped it
# to save ~15 min); this reads it afterwards, as the other drafts' model cards have it. A copy of the finished run
# resumes at step 300, so nothing trains; the measured field goes into runs/s17-export/poss3's model card and
# poss_draft.json, the weights checked identical.
set -e
cd "$(dirname "$0")/.."
export PYTHONPATH=.
rm -rf runs/s17c-poss3 runs/s17c-export && cp -r runs/s17b-poss3 runs/s17c-poss3
.venv/bin/python -m poss_core.training.train --preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers \
    data/smollm2-135m-bf16 data/smollm2-135m-self data/smollm2-135m-self2 data/smollm2-135m-t0 data/smollm2-135m-long \
    data/smollm2-135m-self3 data/smollm2-135m-self4 data/smollm2-135m-self5 --tokens-per-batch 1024 --draft-vocab 8192 \
    --lr 5e-4 --autocast bfloat16 --save-every 100 --steps 300 --batch-seed 23 --export runs/s17c-export \
    --final-eval decoding --max-len 1792 --specialists-from runs/s16a-export --unroll decoding --methods poss3 \
    --threads 2 --out runs/s17c-poss3
cmp runs/s17c-export/poss3/model.safetensors runs/s17-export/poss3/model.safetensors
.venv/bin/python - <<'PY'
import json
key = "heldout_top1_by_position_decoding"
new = json.load(open("runs/s17c-export/poss3/model_card.json"))[key]
def with_heldout(record: dict) -> dict:  # the key where train.py puts it, after seconds_this_run
    out = {}
    for k, v in record.items():
        out[k] = v
        if k == "seconds_this_run":
            out[key] = new
    return out
card_path, meta_path = "runs/s17-export/poss3/model_card.json", "runs/s17-export/poss3/poss_draft.json"
card = with_heldout(json.load(open(card_path)))
open(card_path, "w").write(json.dumps(card, indent=2))
meta = json.load(open(meta_path)); meta["training"] = with_heldout(meta["training"])
open(meta_path, "w").write(json.dumps(meta))
print(key, new)
PY
