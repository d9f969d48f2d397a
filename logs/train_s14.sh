#!/bin/bash
# Stage 11 (prepared in session 13, not yet run): the recipe of stage 10 (logs/train_s13.sh) from the bundled drafts,
# with the 3,072 greedy Magpie answers of logs/data_s12.sh (data/smollm2-135m-self3) added: the held-out gap says the
# drafts are short of data, not of steps. Batch orders 18/19. Resumable (runs/s14*/<method>/resume.pt).
EXTRA_DATA="data/smollm2-135m-t0 data/smollm2-135m-long data/smollm2-135m-self3" TAG=s14 A_STEPS=4000 A_MAX_LEN=1792 \
    SEED_A=18 SEED_B=19 SAVE_EVERY=100 A_EVAL=none B_EVAL=decoding exec bash "$(dirname "$0")/train_s8.sh" "$@"
