#!/bin/bash
# One stage's b-phase as memory allows: POSS-2 on one thread beside EAGLE's and the matched control's steps, then
# POSS-3 on two threads (never two POSS runs together: ~12 GB each). Usage (logs/next_s17.sh, logs/next_s18.sh):
#   bash logs/b_phase_chain.sh TRAIN_SCRIPT STAGE NEEDED_FILE WHAT_MAKES_IT
cd "$(dirname "$0")/.."
train=$1 stage=$2 needed=$3 maker=$4
[ -f "$needed" ] || { echo "$needed is missing: run $maker first" >&2; exit 1; }
POSS_THREADS=1 bash "$train" b-poss poss2 & poss2=$!
bash "$train" b-teacher
wait $poss2
POSS_THREADS=2 bash "$train" b-poss poss3
echo "stage $stage done $(date)"
