#!/bin/bash
# Stage 13 (its chain's process id as the argument), benchmarked and scored by logs/after_stage.sh:
#   nohup bash logs/next_s16.sh > logs/chain_s16.log 2>&1 & nohup bash logs/after_s16.sh $! > logs/after_s16.log 2>&1 &
exec bash "$(dirname "$0")/after_stage.sh" "$1" s16 "stage 13"
