#!/bin/bash
# Stage 13 (prepared in session 15): stage 12's recipe (logs/train_s15.sh) from the bundled stage-12 drafts, with the
# 3,072 more greedy Magpie answers of logs/data_s16.sh (data/smollm2-135m-self5) added. Batch orders 22/23. Resumable
# (runs/s16*/<method>/resume.pt).
EXTRA_DATA="data/smollm2-135m-t0 data/smollm2-135m-long data/smollm2-135m-self3 data/smollm2-135m-self4 data/smollm2-135m-self5" TAG=s16 \
    A_STEPS=4000 A_MAX_LEN=1792 SEED_A=22 SEED_B=23 SAVE_EVERY=100 A_EVAL=none B_EVAL=decoding \
    exec bash "$(dirname "$0")/train_s8.sh" "$@"
