#!/bin/bash
# Stage 7 again (tenth session, a fresh machine: runs/ of sessions 8-9 was gone), the same recipe as logs/train_s9.sh
# from the bundled stage-6 drafts, run to the end this time:
#   a) EAGLE and the matched control continue 4,000 steps (batch order 10, one thread each, side by side);
#   b) POSS-2 and POSS-3 restart from that EAGLE layer for 300 steps with the decoding unroll (batch order 11); EAGLE
#      and the matched control take the same 300 steps.
# The a-stage skips the trainer's final held-out evaluation (b continues it) and b scores the decoding unroll only
# (the one decoding uses; the predicted one took >25 min for the matched control under contention in session 9).
TAG=s10 A_STEPS=4000 SEED_A=10 SEED_B=11 SAVE_EVERY=100 A_EVAL=none B_EVAL=decoding \
    exec bash "$(dirname "$0")/train_s8.sh" "$@"
