#!/bin/bash
# Stage 15 (session 18): a longer b-phase, the lever session 17 named. Every method continues its own stage-14 draft
# (runs/s17-export, POSS's specialists included: B_INIT) for 500 more steps on the same data, rows up to 1,792 tokens,
# a new batch order (24). POSS's decoding unroll then has 800 steps of its own (300 + 500) instead of 300; EAGLE and the
# matched control get the same 500 steps teacher-forced, so every method still ends with the same step count (35,900).
# Resumable (runs/s18b-*/<method>/resume.pt). POSS-3 skips the training log's final held-out read (~15 min);
# logs/eval_stage.sh scores every draft on the held-out slices anyway.
EXTRA_DATA="data/smollm2-135m-t0 data/smollm2-135m-long data/smollm2-135m-self3 data/smollm2-135m-self4 data/smollm2-135m-self5" TAG=s18 \
    B_INIT=runs/s17-export B_STEPS=500 B_MAX_LEN=1792 SEED_B=24 SAVE_EVERY=100 \
    B_EVAL=$([ "$2" = poss3 ] && echo none || echo decoding) \
    exec bash "$(dirname "$0")/train_s8.sh" "$@"
