#!/bin/bash
# Session 9: run the rest of stage 7 (logs/train_s9.sh) as the CPU frees up. Two decoding-unroll POSS runs together
# would not fit in 24 GB (~12 GB each beside the 7 GB of a teacher-forced run), so: POSS-2 (one thread) starts when
# the stage-7a EAGLE is exported; the teacher-forced 300 steps of EAGLE and matched (b-teacher, one thread) when the
# matched control is; POSS-3 (two threads) when POSS-2 is done.
# What ran in session 9 differs: the machine slowed (POSS-2 8 -> 18 s per step, matched 1.1 -> 2.5 s), so this script
# was stopped after starting POSS-2; EAGLE's 300 b-teacher steps ran beside POSS-2; the matched control was exported
# without its 300 and POSS-3 stopped after 78 steps; the benchmarks (logs/bench_s9.sh) measured EAGLE and POSS-2.
cd "$(dirname "$0")/.."
running() { pgrep -f -- "--out runs/$1( |$)" > /dev/null; }
while running s9a-eagle; do sleep 20; done
POSS_THREADS=1 bash logs/train_s9.sh b-poss poss2 &
while running s9a-matched; do sleep 20; done
bash logs/train_s9.sh b-teacher
while running s9b-poss2; do sleep 20; done
bash logs/train_s9.sh b-poss poss3
echo "stage 7 done $(date)"
