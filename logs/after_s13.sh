#!/bin/bash
# Stage 10 (logs/chain_s13.sh, process id as the argument), scored and benchmarked by logs/after_stage.sh:
#   nohup bash logs/chain_s13.sh > logs/chain_s13.log 2>&1 & nohup bash logs/after_s13.sh $! > logs/after_s13.log 2>&1 &
exec bash "$(dirname "$0")/after_stage.sh" "$1" s13 "stage 10"
