#!/bin/bash
# Stage 9 (logs/train_s12.sh), by logs/chain_stage.sh; resumable, so a later session reruns it to continue.
exec bash "$(dirname "$0")/chain_stage.sh" logs/train_s12.sh "stage 9"
