#!/bin/bash
# Stage-9 benchmarks (runs/s12-export): bash logs/bench_s12.sh paper|auto (logs/bench_stage.sh).
exec bash "$(dirname "$0")/bench_stage.sh" s12 "$@"
