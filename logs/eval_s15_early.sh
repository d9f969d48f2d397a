#!/bin/bash
# Session 15: stage 12's held-out scores (logs/eval_stage.sh s15) for the drafts already trained while POSS-3's b-phase
# still ran, one thread on the core training left free; POSS-3 afterwards with METHODS=poss3 SUFFIX=-poss3 THREADS=2.
METHODS=${METHODS:-eagle,poss2,matched} THREADS=${THREADS:-1} bash "$(dirname "$0")/eval_stage.sh" s15
