#!/bin/bash
# Stage 14 (logs/train_s17.sh), the b-phase alone: POSS-2 on one thread beside EAGLE's and the matched control's 300
# steps, then POSS-3 on two threads (never two POSS runs together: ~12 GB each). Measured by
# logs/after_stage_overlap.sh s17:
#   nohup bash logs/next_s17.sh > logs/chain_s17.log 2>&1 & nohup bash logs/after_stage_overlap.sh s17 > logs/after_s17.log 2>&1 &
exec bash "$(dirname "$0")/b_phase_chain.sh" logs/train_s17.sh 14 runs/s16a-export/eagle/config.json \
    "logs/next_s16.sh (stage 13's a-phase)"
