#!/bin/bash
# Stage-12 benchmarks (runs/s15-export): bash logs/bench_s15.sh paper|auto (logs/bench_stage.sh).
exec bash "$(dirname "$0")/bench_stage.sh" s15 "$@"
