#!/bin/bash
# Stage 9, the recipe of stages 6-8 (logs/train_s11.sh) from the bundled stage-8 drafts, on more data: the 3,072
# T0 and self-instruct prompts answered in the eleventh session (data/smollm2-135m-t0; logs/rebuild_data.sh):
#   a) EAGLE and the matched control continue 4,000 steps (batch order 14, one thread each, side by side);
#   b) POSS-2 and POSS-3 restart from that EAGLE layer for 300 steps with the decoding unroll (batch order 15); EAGLE
#      and the matched control take the same 300 steps.
# Every step is resumable (runs/s12*/<method>/resume.pt): the same command continues where a session stopped.
EXTRA_DATA=data/smollm2-135m-t0 TAG=s12 A_STEPS=4000 SEED_A=14 SEED_B=15 SAVE_EVERY=100 A_EVAL=none B_EVAL=decoding \
    exec bash "$(dirname "$0")/train_s8.sh" "$@"
