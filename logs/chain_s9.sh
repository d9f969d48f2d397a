#!/bin/bash
# Session 9: run the rest of stage 7 (logs/train_s9.sh) as the CPU frees up, two 1-thread jobs at a time:
# POSS-2 starts when the stage-7a EAGLE is exported, POSS-3 when the matched control is, then the teacher-forced
# 300 steps of EAGLE and matched (b-teacher) once both POSS runs are done.
cd "$(dirname "$0")/.."
running() { pgrep -f -- "--out runs/$1( |$)" > /dev/null; }
while running s9a-eagle; do sleep 20; done
POSS_THREADS=1 bash logs/train_s9.sh b-poss poss2 &
while running s9a-matched; do sleep 20; done
POSS_THREADS=1 bash logs/train_s9.sh b-poss poss3 &
wait
bash logs/train_s9.sh b-teacher
echo "stage 7 done $(date)" >> logs/s9-chain.log
