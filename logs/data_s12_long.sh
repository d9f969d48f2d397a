#!/bin/bash
# Twelfth session: long-context data. Every training folder so far kept only the last 256 prompt tokens and sequences
# of at most 512, so the drafts never drafted over a long document (summaries of long articles are the lowest τ).
# The T0 prompts of ../shared/data/train with at least 320 tokens (passages: movie plots, Wikipedia, reviews) are
# kept whole (up to 1,536 tokens) behind a summarization instruction and answered greedily in bf16:
#   data/smollm2-135m-longeval  48 of them, held out (the evaluation slice for long contexts; never trained on)
#   data/smollm2-135m-long      480 of the rest (870 are that long; 480 fit the session's time)
# Resumable; the token ids are then copied to assets/training_data/.
set -e
cd "$(dirname "$0")/.."
run() { PYTHONPATH=. .venv/bin/python -m poss_core.training.data --preset smollm2-135m \
  --prompts ../shared/data/train/t0_prompts.jsonl --instruction "Summarize the following text in a few sentences." \
  --min-prompt-tokens 320 --max-prompt-tokens 1536 --batch-size 16 --max-new-tokens 160 --dtype bfloat16 "$@"; }
run --limit 48 --seed 11 --out data/smollm2-135m-longeval
run --seed 12 --limit 480 --exclude data/smollm2-135m-longeval --out data/smollm2-135m-long
