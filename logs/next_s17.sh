#!/bin/bash
# Stage 14 (logs/train_s17.sh), the b-phase alone: POSS-2 on one thread beside EAGLE's and the matched control's 300
# steps, then POSS-3 on two threads (never two POSS runs together: ~12 GB each). Measured by
# logs/after_stage_overlap.sh s17:
#   nohup bash logs/next_s17.sh > logs/chain_s17.log 2>&1 & nohup bash logs/after_stage_overlap.sh s17 > logs/after_s17.log 2>&1 &
cd "$(dirname "$0")/.."
[ -f runs/s16a-export/eagle/config.json ] || { echo "stage 13's a-phase (runs/s16a-export) is missing: run logs/next_s16.sh first" >&2; exit 1; }
POSS_THREADS=1 bash logs/train_s17.sh b-poss poss2 & poss2=$!
bash logs/train_s17.sh b-teacher
wait $poss2
POSS_THREADS=2 bash logs/train_s17.sh b-poss poss3
echo "stage 14 done $(date)"
