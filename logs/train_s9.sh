#!/bin/bash
# Stage 7 (started at the end of session 8, resumable: checkpoints every 100 steps; rerun the same line to resume).
# logs/probe_s8_long.sh showed the single EAGLE layer still gains 3-4 held-out points per ~2,400 steps, so:
#   a) EAGLE and the matched control continue 4,000 steps from the bundled stage-6 drafts (batch order 10, one
#      thread each, side by side);
#   b) POSS-2 and POSS-3 restart from that EAGLE layer for 300 steps with the decoding unroll (batch order 11), one at a
#      time on 2 threads; EAGLE and the matched control take the same 300 steps.
# Every draft then has 9,600 steps (POSS: 9,300 as EAGLE + 300 as POSS). Same steps as logs/train_s8.sh (stage 6).
TAG=s9 A_STEPS=4000 SEED_A=10 SEED_B=11 SAVE_EVERY=100 exec bash "$(dirname "$0")/train_s8.sh" "$@"
