#!/bin/bash
# Stage 12 (prepared in session 14): stage 11's recipe (logs/train_s14.sh) from the bundled stage-11 drafts, with the
# 3,072 more greedy Magpie answers of logs/data_s15.sh (data/smollm2-135m-self4) added. Batch orders 20/21. Resumable
# (runs/s15*/<method>/resume.pt).
EXTRA_DATA="data/smollm2-135m-t0 data/smollm2-135m-long data/smollm2-135m-self3 data/smollm2-135m-self4" TAG=s15 \
    A_STEPS=4000 A_MAX_LEN=1792 SEED_A=20 SEED_B=21 SAVE_EVERY=100 A_EVAL=none B_EVAL=decoding \
    exec bash "$(dirname "$0")/train_s8.sh" "$@"
