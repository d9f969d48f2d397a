#!/bin/bash
# Stage 8 (eleventh session), the recipe of stages 6 and 7 (logs/train_s10.sh) from the bundled stage-7 drafts:
#   a) EAGLE and the matched control continue 4,000 steps (batch order 12, one thread each, side by side);
#   b) POSS-2 and POSS-3 restart from that EAGLE layer for 300 steps with the decoding unroll (batch order 13); EAGLE
#      and the matched control take the same 300 steps.
# Every draft then has 13,900 steps (EAGLE 13,600 + 300 as POSS for the POSS drafts).
TAG=s11 A_STEPS=4000 SEED_A=12 SEED_B=13 SAVE_EVERY=100 A_EVAL=none B_EVAL=decoding \
    exec bash "$(dirname "$0")/train_s8.sh" "$@"
