#!/bin/bash
# Stage 10 (logs/train_s13.sh), by logs/chain_stage.sh; resumable, so a later session reruns it to continue.
exec bash "$(dirname "$0")/chain_stage.sh" logs/train_s13.sh "stage 10"
