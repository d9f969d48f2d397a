#!/bin/bash
# Session 15: does a longer calibration on held-out prompts make `auto` choose better? The same auto benchmark as
# logs/bench_stage.sh TAG auto, calibrated on 24 of the 64 held-out self-written prompts (data/smollm2-135m-selfeval,
# never trained on, never eval/) with 64 new tokens each, instead of the 6 built-in prompts with 48.
# Usage: bash logs/bench_s15_calib.sh [TAG]  -> results/TAG-auto-bf16-calib
cd "$(dirname "$0")/.."
TAG=${1:-s15}
.venv/bin/python - <<'PY'
import json
rows = [p for line in open("data/smollm2-135m-selfeval/self_prompts.jsonl") if line.strip()
        for p in json.loads(line)["prompts"]]
with open("runs/calib_selfeval.jsonl", "w") as f:
    f.writelines(json.dumps({"prompt": p}) + "\n" for p in rows)
print(f"{len(rows)} held-out prompts -> runs/calib_selfeval.jsonl")
PY
AUTO_ARGS="--calibration-data runs/calib_selfeval.jsonl --calibration-prompts 24 --calibration-tokens 64" \
    AUTO_SUFFIX=-calib bash logs/bench_stage.sh $TAG auto
