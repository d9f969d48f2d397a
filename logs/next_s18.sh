#!/bin/bash
# Stage 15 (logs/train_s18.sh): POSS-2 on one thread beside EAGLE's and the matched control's 500 steps, then POSS-3 on
# two threads (never two POSS runs together: ~12 GB each); about 100 min here (08:52-10:35). Measured by logs/after_s18.sh:
#   nohup bash logs/next_s18.sh > logs/chain_s18.log 2>&1 & nohup bash logs/after_s18.sh > logs/after_s18.log 2>&1 &
cd "$(dirname "$0")/.."
[ -f runs/s17-export/poss3/config.json ] || { echo "stage 14's drafts (runs/s17-export) are missing: run logs/next_s17.sh first" >&2; exit 1; }
POSS_THREADS=1 bash logs/train_s18.sh b-poss poss2 & poss2=$!
bash logs/train_s18.sh b-teacher
wait $poss2
POSS_THREADS=2 bash logs/train_s18.sh b-poss poss3
echo "stage 15 done $(date)"
