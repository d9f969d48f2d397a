#!/bin/bash
# Session-11 benchmarks of the stage-8 drafts (runs/s11-export): bash logs/bench_s11.sh paper|auto (logs/bench_stage.sh).
exec bash "$(dirname "$0")/bench_stage.sh" s11 "$@"
