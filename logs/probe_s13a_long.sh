#!/bin/bash
# Session 12: as soon as stage 10's a-phase is exported, an early read of the long-document slice for its EAGLE and
# matched control (against stage 9a's .494 / .509 at k=1), beside the b-phase (top-1 does not depend on speed).
cd "$(dirname "$0")/.."
while [ ! -f runs/s13a-export/matched/config.json ]; do sleep 15; done
bash logs/eval_long.sh s13a runs/s13a-export; echo "long eval s13a done $(date)"
