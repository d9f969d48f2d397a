#!/bin/bash
# Session-5 training (stage 4): POSS-2 and POSS-3 continue 300 steps from the bundled stage-3 drafts with the
# decoding unroll (HASS's context alignment); EAGLE and the matched control get the same 300 steps on the same
# batches (--batch-seed 6: an order no earlier stage used; the held-out split of --seed 0 unchanged).
# Memory: a decoding-unroll POSS training peaks near 12 GB resident (attention over 6 stacked blocks of up to 512
# rows), so two side by side nearly fill 24 GB and crawl (10-15 s per step each); POSS-3 was stopped at its step-150
# checkpoint and resumed alone with 2 threads ("poss3 --threads 2": 3.7 s per step) once POSS-2 had finished. The
# teacher-forced runs need little memory and ran on the free core meanwhile.
COMMON="--preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers data/smollm2-135m-bf16 \
 data/smollm2-135m-self data/smollm2-135m-self2 --init-from assets/drafts/smollm2-135m --steps 300 \
 --tokens-per-batch 1024 --draft-vocab 8192 --lr 5e-4 --autocast bfloat16 --threads 1 --save-every 25 \
 --batch-seed 6 --export runs/s5-export"
run() {  # run <out> <log> <args...>
  local out=$1 log=$2; shift 2
  PYTHONPATH=. .venv/bin/python -m poss_core.training.train $COMMON "$@" --out "$out" > "$log" 2>&1
}
case "$1" in
  poss2) run runs/s5a logs/s5a.log --unroll decoding --methods poss2 "${@:2}" ;;
  poss3) run runs/s5b logs/s5b.log --unroll decoding --methods poss3 "${@:2}" ;;
  teacher) run runs/s5c logs/s5c.log --methods eagle && run runs/s5d logs/s5d.log --methods matched ;;
  from-eagle-poss2|from-eagle-poss3)
    # Variant: POSS's specialists start as copies of the stage-3 EAGLE layer (the paper's recipe); its EAGLE control
    # is the same 300-step continuation (runs/s5c), since EAGLE starts from its own layer either way.
    m=${1#from-eagle-}
    FE="${COMMON/--init-from assets\/drafts\/smollm2-135m/--specialists-from assets/drafts/smollm2-135m}"
    COMMON="${FE/runs\/s5-export/runs/s5-export-fe}" run runs/s5-fe-$m logs/s5-fe-$m.log --unroll decoding --methods $m "${@:2}" ;;
  *) echo "usage: $0 poss2|poss3|teacher|from-eagle-poss2|from-eagle-poss3" >&2; exit 2 ;;
esac
