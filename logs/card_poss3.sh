#!/bin/bash
# A stage's POSS-3 trains without the training log's final held-out read (it costs ~15 min on long rows); this reads
# it afterwards, as the other drafts' model cards have it. A copy of the finished run resumes at its last step, so
# nothing trains; the measured field goes into runs/TAG-export/poss3's model card and poss_draft.json, the weights
# checked identical. Usage: bash logs/card_poss3.sh TAG STEPS BATCH_SEED INIT_FLAG FOLDER, e.g.
#   bash logs/card_poss3.sh s17 300 23 --specialists-from runs/s16a-export   # stage 14 (session 17)
#   bash logs/card_poss3.sh s18 500 24 --init-from runs/s17-export           # stage 15 (session 18)
set -e
cd "$(dirname "$0")/.."
export PYTHONPATH=.
tag=${1:?usage: $0 TAG STEPS BATCH_SEED INIT_FLAG FOLDER} steps=$2 seed=$3 init_flag=$4 init_folder=$5
rm -rf runs/${tag}c-poss3 runs/${tag}c-export && cp -r runs/${tag}b-poss3 runs/${tag}c-poss3
.venv/bin/python -m poss_core.training.train --preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers \
    data/smollm2-135m-bf16 data/smollm2-135m-self data/smollm2-135m-self2 data/smollm2-135m-t0 data/smollm2-135m-long \
    data/smollm2-135m-self3 data/smollm2-135m-self4 data/smollm2-135m-self5 --tokens-per-batch 1024 --draft-vocab 8192 \
    --lr 5e-4 --autocast bfloat16 --save-every 100 --steps $steps --batch-seed $seed --export runs/${tag}c-export \
    --final-eval decoding --max-len 1792 $init_flag $init_folder --unroll decoding --methods poss3 \
    --threads 2 --out runs/${tag}c-poss3
cmp runs/${tag}c-export/poss3/model.safetensors runs/${tag}-export/poss3/model.safetensors
TAG=$tag .venv/bin/python - <<'PY'
import json
import os
tag = os.environ["TAG"]
key = "heldout_top1_by_position_decoding"
new = json.load(open(f"runs/{tag}c-export/poss3/model_card.json"))[key]
def with_heldout(record: dict) -> dict:  # the key where train.py puts it, after seconds_this_run
    out = {}
    for k, v in record.items():
        out[k] = v
        if k == "seconds_this_run":
            out[key] = new
    return out
card_path, meta_path = f"runs/{tag}-export/poss3/model_card.json", f"runs/{tag}-export/poss3/poss_draft.json"
card = with_heldout(json.load(open(card_path)))
open(card_path, "w").write(json.dumps(card, indent=2))
meta = json.load(open(meta_path)); meta["training"] = with_heldout(meta["training"])
open(meta_path, "w").write(json.dumps(meta))
print(key, new)
PY
