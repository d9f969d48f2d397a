#!/bin/bash
# Stage 11 (its chain's process id as the argument), benchmarked and scored by logs/after_stage.sh:
#   nohup bash logs/next_s14.sh > logs/chain_s14.log 2>&1 & nohup bash logs/after_s14.sh $! > logs/after_s14.log 2>&1 &
exec bash "$(dirname "$0")/after_stage.sh" "$1" s14 "stage 11"
