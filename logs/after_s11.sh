#!/bin/bash
# Session 11: stage 8 (logs/chain_s11.sh, process id as the argument), scored and benchmarked by logs/after_stage.sh.
exec bash "$(dirname "$0")/after_stage.sh" "$1" s11 "stage 8"
