#!/bin/bash
# Session 18, once stage 15's held-out scores said bundle: the timed `auto` benchmark on 256-token answers (quiet
# machine), then POSS-3's model-card held-out read (logs/card_poss3.sh), after which runs/s18-export is bundled.
# Usage: nohup bash logs/after_s18_tail.sh > logs/after_s18_tail.log 2>&1 &
cd "$(dirname "$0")/.."
AUTO_METHODS=ar,eagle,poss2,poss3 AUTO_MAX_NEW=256 AUTO_SUFFIX=-256 bash logs/bench_stage.sh s18 auto
echo "auto 256 done $(date)"
bash logs/card_poss3.sh s18 500 24 --init-from runs/s17-export > logs/card_s18_poss3.log 2>&1
echo "poss3 card done $(date)"
