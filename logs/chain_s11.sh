#!/bin/bash
# Session 11: the whole of stage 8 (logs/train_s11.sh), by logs/chain_stage.sh.
exec bash "$(dirname "$0")/chain_stage.sh" logs/train_s11.sh "stage 8"
