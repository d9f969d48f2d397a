#!/bin/bash
# Stage 12 (its chain's process id as the argument), benchmarked and scored by logs/after_stage.sh:
#   nohup bash logs/next_s15.sh > logs/chain_s15.log 2>&1 & nohup bash logs/after_s15.sh $! > logs/after_s15.log 2>&1 &
exec bash "$(dirname "$0")/after_stage.sh" "$1" s15 "stage 12"
