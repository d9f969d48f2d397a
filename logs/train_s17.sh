#!/bin/bash
# Stage 14 (session 17): only a new b-phase. Stage 13's a-phase (runs/s16a-export, 35,100 steps) lifted the long
# documents (EAGLE .598 at k=1), and its common 300 b-steps on rows cut to 512 tokens took 4.2 points of it back; here
# the b-phase keeps rows up to 1,792 tokens as the a-phase did (B_MAX_LEN), same data, same batch order (23) and the
# same steps for every method. Resumable (runs/s17b-*/<method>/resume.pt). POSS-3 skips the training log's final
# held-out read (~15 min on long rows; logs/eval_stage.sh scores every draft on the held-out slices anyway).
EXTRA_DATA="data/smollm2-135m-t0 data/smollm2-135m-long data/smollm2-135m-self3 data/smollm2-135m-self4 data/smollm2-135m-self5" TAG=s17 \
    A_EXPORT=runs/s16a-export B_MAX_LEN=1792 SEED_B=23 SAVE_EVERY=100 B_EVAL=$([ "$2" = poss3 ] && echo none || echo decoding) \
    exec bash "$(dirname "$0")/train_s8.sh" "$@"
