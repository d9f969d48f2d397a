#!/bin/bash
# Session-10 benchmarks of the complete stage-7 drafts (runs/s10-export): bash logs/bench_s10.sh paper|auto
# (logs/bench_stage.sh).
exec bash "$(dirname "$0")/bench_stage.sh" s10 "$@"
