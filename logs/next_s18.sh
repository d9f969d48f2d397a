#!/bin/bash
# Stage 15 (logs/train_s18.sh): POSS-2 on one thread beside EAGLE's and the matched control's 500 steps, then POSS-3 on
# two threads (never two POSS runs together: ~12 GB each); about 100 min here (08:52-10:35). Measured by logs/after_s18.sh:
#   nohup bash logs/next_s18.sh > logs/chain_s18.log 2>&1 & nohup bash logs/after_s18.sh > logs/after_s18.log 2>&1 &
exec bash "$(dirname "$0")/b_phase_chain.sh" logs/train_s18.sh 15 runs/s17-export/poss3/config.json \
    "logs/next_s17.sh (stage 14)"
