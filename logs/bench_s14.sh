#!/bin/bash
# Stage-11 benchmarks (runs/s14-export): bash logs/bench_s14.sh paper|auto (logs/bench_stage.sh).
exec bash "$(dirname "$0")/bench_stage.sh" s14 "$@"
