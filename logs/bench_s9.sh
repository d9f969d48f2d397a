#!/bin/bash
# Session-9 benchmarks of the stage-7 drafts (runs/s9-export): logs/bench_s5.sh's two commands with the methods
# stage 7 has (POSS-3 and the matched control did not finish it):
#   bash logs/bench_s9.sh paper    # the paper's settings -> results/s9-paper (τ and pos-acc do not depend on speed)
#   bash logs/bench_s9.sh auto     # bf16, --tree-budget auto -> results/s9-auto-bf16 (needs a quiet machine)
case "$1" in
  paper|auto) ;;
  *) echo "usage: $0 paper|auto" >&2; exit 2 ;;
esac
ONLY=$1 PAPER_METHODS=ar,eagle,poss2 AUTO_METHODS=ar,ar-float32,eagle,poss2 \
    exec bash "$(dirname "$0")/bench_s5.sh" runs/s9-export s9
