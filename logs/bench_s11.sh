#!/bin/bash
# Session-11 benchmarks of the stage-8 drafts (runs/s11-export), logs/bench_s5.sh's two commands:
#   bash logs/bench_s11.sh paper   # the paper's settings, every draft -> results/s11-paper (τ does not depend on speed)
#   bash logs/bench_s11.sh auto    # bf16, --tree-budget auto -> results/s11-auto-bf16 (needs a quiet machine)
case "$1" in
  paper|auto) ;;
  *) echo "usage: $0 paper|auto" >&2; exit 2 ;;
esac
ONLY=$1 PAPER_METHODS=ar,eagle,poss2,poss3,matched exec bash "$(dirname "$0")/bench_s5.sh" runs/s11-export s11
