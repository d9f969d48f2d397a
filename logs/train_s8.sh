#!/bin/bash
# Session-8 training (stage 6), the paper's recipe on a longer-trained EAGLE (the probe of logs/probe_s8.sh chose the
# paper's loss weighting: token-heavy and hass both did worse on the held-out slice):
#   a) EAGLE and the matched control continue 1,500 steps from the bundled stage-5 drafts (batch order 8);
#   b) POSS-2 and POSS-3 start again from that EAGLE layer (every specialist a copy of it) and train 300 steps with
#      the decoding unroll; EAGLE and the matched control get the same 300 steps on the same batches (order 9).
# So every method ends with the same number of steps (EAGLE 3,500 + 1,800; POSS 5,000 as EAGLE + 300 as POSS).
# A later stage reuses this script with TAG, A_STEPS, SEED_A, SEED_B, SAVE_EVERY, POSS_THREADS, A_EVAL and B_EVAL
# (each stage's --final-eval), B_MAX_LEN (the b-phase's --max-len), A_EXPORT (the a-phase drafts the b-phase starts
# from), EXTRA_DATA (more data folders), A_MAX_LEN (the a-phase's --max-len) and INIT (the
# drafts the a-phase continues; the bundled ones by default) set (logs/train_s9.sh to logs/train_s13.sh); logs are
# appended to, so a resumed run keeps its earlier lines. B_STEPS sets the b-phase's steps (300) and B_INIT makes the
# b-phase continue every method's own drafts in that folder, POSS's specialists included (logs/train_s18.sh).
export PYTHONPATH=.
DATA="--preset smollm2-135m --data data/smollm2-135m data/smollm2-135m-answers data/smollm2-135m-bf16 \
 data/smollm2-135m-self data/smollm2-135m-self2 ${EXTRA_DATA:-} --tokens-per-batch 1024 --draft-vocab 8192 --lr 5e-4 \
 --autocast bfloat16 --save-every ${SAVE_EVERY:-50}"
T=${TAG:-s8}
train() {  # train <log> <args...>
  local log=$1; shift
  .venv/bin/python -m poss_core.training.train $DATA "$@" >> "$log" 2>&1
}
A="--init-from ${INIT:-assets/drafts/smollm2-135m} --steps ${A_STEPS:-1500} --batch-seed ${SEED_A:-8} --threads 1 --export runs/${T}a-export ${A_EVAL:+--final-eval $A_EVAL} ${A_MAX_LEN:+--max-len $A_MAX_LEN}"
B="--steps ${B_STEPS:-300} --batch-seed ${SEED_B:-9} --export runs/${T}-export ${B_EVAL:+--final-eval $B_EVAL} ${B_MAX_LEN:+--max-len $B_MAX_LEN}"
AX=${B_INIT:-${A_EXPORT:-runs/${T}a-export}}  # the drafts the b-phase starts from
# POSS starts from copies of AX's EAGLE layer, or continues its own specialists when B_INIT is given
POSS_INIT=$([ -n "${B_INIT:-}" ] && echo "--init-from $AX" || echo "--specialists-from $AX")
case "$1" in
  a-eagle) train logs/${T}a-eagle.log $A --methods eagle --out runs/${T}a-eagle ;;
  a-matched) train logs/${T}a-matched.log $A --methods matched --out runs/${T}a-matched ;;
  b-eagle|b-matched) m=${1#b-}
             train logs/${T}b-$m.log $B --init-from $AX --methods $m --threads 1 --out runs/${T}b-$m ;;
  b-teacher) bash "$0" b-eagle && bash "$0" b-matched ;;
  b-poss) train logs/${T}b-$2.log $B $POSS_INIT --unroll decoding --methods $2 --threads ${POSS_THREADS:-2} \
              --out runs/${T}b-$2 ;;
  *) echo "usage: $0 a-eagle|a-matched|b-eagle|b-matched|b-teacher|b-poss poss2|poss3" >&2; exit 2 ;;
esac
