#!/bin/bash
# Session-7 training (stage 5): every bundled draft continues 300 more steps from itself on the same data, with a
# batch order no earlier stage used (--batch-seed 7; the held-out split of --seed 0 unchanged). POSS-2 and POSS-3
# (both from-EAGLE since sessions 5/6) keep the decoding unroll; EAGLE and the matched control stay teacher-forced,
# as in every earlier stage. Run one at a time: a decoding-unroll training peaks near 12 GB and uses both cores.
COMMON="--preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers data/smollm2-135m-bf16 \
 data/smollm2-135m-self data/smollm2-135m-self2 --init-from assets/drafts/smollm2-135m --steps 300 \
 --tokens-per-batch 1024 --draft-vocab 8192 --lr 5e-4 --autocast bfloat16 --threads 2 --save-every 25 \
 --batch-seed 7 --export runs/s7-export"
run() {  # run <out> <log> <args...>
  local out=$1 log=$2; shift 2
  PYTHONPATH=. .venv/bin/python -m poss_core.training.train $COMMON "$@" --out "$out" > "$log" 2>&1
}
case "$1" in
  poss2) run runs/s7-poss2 logs/s7-poss2.log --unroll decoding --methods poss2 "${@:2}" ;;
  poss3) run runs/s7-poss3 logs/s7-poss3.log --unroll decoding --methods poss3 "${@:2}" ;;
  teacher) run runs/s7-eagle logs/s7-eagle.log --methods eagle "${@:2}" && \
           run runs/s7-matched logs/s7-matched.log --methods matched "${@:2}" ;;
  *) echo "usage: $0 poss2|poss3|teacher" >&2; exit 2 ;;
esac
