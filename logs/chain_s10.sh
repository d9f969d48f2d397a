#!/bin/bash
# Session 10: the whole of stage 7 (logs/train_s10.sh) on a fresh machine, by logs/chain_stage.sh.
exec bash "$(dirname "$0")/chain_stage.sh" logs/train_s10.sh "stage 7"
