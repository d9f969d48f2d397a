#!/bin/bash
# Stage 10, the recipe of stages 6-9 (logs/train_s12.sh) from the bundled stage-9 drafts, on long documents as well: the 480
# T0 passages behind a summarization instruction of data/smollm2-135m-long (logs/data_s12_long.sh), kept whole in the
# a-phase (--max-len 1792; a sequence longer than a batch is a batch of its own). The b-phase keeps --max-len 512,
# which leaves the long documents out (their prompts alone are longer): the decoding unroll over 1,700-token rows would
# need a 10k x 10k mask per head, and every method gets the same b-phase batches anyway.
#   a) EAGLE and the matched control continue 4,000 steps (batch order 16, one thread each, side by side);
#   b) POSS-2 and POSS-3 restart from that EAGLE layer for 300 steps with the decoding unroll (batch order 17); EAGLE
#      and the matched control take the same 300 steps.
# Resumable (runs/s13*/<method>/resume.pt).
EXTRA_DATA="data/smollm2-135m-t0 data/smollm2-135m-long" TAG=s13 A_STEPS=4000 A_MAX_LEN=1792 SEED_A=16 SEED_B=17 \
    SAVE_EVERY=100 A_EVAL=none B_EVAL=decoding exec bash "$(dirname "$0")/train_s8.sh" "$@"
