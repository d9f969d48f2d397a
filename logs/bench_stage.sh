#!/bin/bash
# One stage's benchmarks (logs/bench_s5.sh's two commands) for the drafts in runs/TAG-export:
#   bash logs/bench_stage.sh TAG paper   # the paper's settings, every draft -> results/TAG-paper (τ does not depend on speed)
#   bash logs/bench_stage.sh TAG auto    # bf16, --tree-budget auto -> results/TAG-auto-bf16 (needs a quiet machine)
case "$2" in
  paper|auto) ;;
  *) echo "usage: $0 TAG paper|auto" >&2; exit 2 ;;
esac
ONLY=$2 PAPER_METHODS=ar,eagle,poss2,poss3,matched exec bash "$(dirname "$0")/bench_s5.sh" "runs/$1-export" "$1"
