#!/bin/bash
# Stage-10 benchmarks (runs/s13-export): bash logs/bench_s13.sh paper|auto (logs/bench_stage.sh).
exec bash "$(dirname "$0")/bench_stage.sh" s13 "$@"
