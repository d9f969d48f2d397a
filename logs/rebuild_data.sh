#!/bin/bash
# Rebuild the training features of the bundled drafts on a fresh machine from the committed token ids
# (assets/training_data/, see its README): only the target's forward runs, nothing is generated.
# Two of the first session's folders were cut short by hand; `until_shard` stops those at the same shard.
set -u
export PYTHONPATH=.
PY=.venv/bin/python
until_shard() {  # until_shard <folder> <last shard index> <data args...>: run, stop once that shard is written
  local dir=$1 last=$2; shift 2
  local shard; shard=$(printf "%s/shard-%05d.safetensors" "$dir" "$last")
  [ -f "$shard" ] && return 0
  $PY -m poss_core.training.data "$@" --out "$dir" & local pid=$!
  while kill -0 $pid 2>/dev/null && [ ! -f "$shard" ]; do sleep 2; done
  kill $pid 2>/dev/null; wait $pid 2>/dev/null || true  # killed on purpose: not a failure
  [ -f "$shard" ]
}
mkdir -p data
for f in smollm2-135m-bf16 smollm2-135m-self smollm2-135m-self2 smollm2-135m-selfeval smollm2-135m-t0 \
    smollm2-135m-longeval smollm2-135m-long smollm2-135m-self3 smollm2-135m-self4 smollm2-135m-self5; do
  [ -d data/$f ] || [ ! -d assets/training_data/$f ] || cp -r assets/training_data/$f data/
done
mkdir -p data/smollm2-135m && cp -rn assets/training_data/smollm2-135m/tokens data/smollm2-135m/
set -e
$PY -m poss_core.training.data --preset smollm2-135m --prompts "../shared/data/train/*.jsonl" --limit 2560 \
  --batch-size 64 --max-new-tokens 160 --dtype bfloat16 --seed 1 --out data/smollm2-135m-bf16
for s in "self 3" "self2 5" "selfeval 4"; do set -- $s
  n=$([ "$1" = selfeval ] && echo 64 || echo 1536)
  $PY -m poss_core.training.data --preset smollm2-135m --self-prompts $n --batch-size 64 --max-new-tokens 192 \
    --temperature 0.6 --dtype bfloat16 --seed $2 --out data/smollm2-135m-$1
done
until_shard data/smollm2-135m 5 --preset smollm2-135m --prompts "../shared/data/train/*.jsonl" --limit 2400 \
  --batch-size 48 --max-new-tokens 160
until_shard data/smollm2-135m-answers 44 --preset smollm2-135m --answers dataset \
  --prompts "../shared/data/train/*.jsonl" --limit 1600 --batch-size 16 --max-new-tokens 256
# Eleventh session: the T0 and self-instruct prompts no folder above had used (so it comes after them).
$PY -m poss_core.training.data --preset smollm2-135m --prompts ../shared/data/train/t0_prompts.jsonl \
  ../shared/data/train/self_instruct_seed_tasks.jsonl ../shared/data/train/self_instruct_user_oriented.jsonl \
  --exclude data/smollm2-135m-bf16 data/smollm2-135m data/smollm2-135m-answers \
  --limit 3072 --batch-size 64 --max-new-tokens 160 --dtype bfloat16 --seed 7 --out data/smollm2-135m-t0
# Twelfth session: long documents (the held-out slice first; the training folder excludes it).
bash logs/data_s12_long.sh
# Thirteenth session: 3,072 more self-written prompts, answered greedily (stage 11's extra data).
bash logs/data_s12.sh
# Fourteenth session: 3,065 more self-written prompts, answered greedily (stage 12's extra data).
bash logs/data_s15.sh
# Fifteenth session: 3,072 more (stage 13's extra data).
bash logs/data_s16.sh
touch data/.rebuilt && echo "data rebuilt"
