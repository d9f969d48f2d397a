#!/bin/bash
# Stage-10 offline evaluation (runs/s13a-export, runs/s13-export): logs/eval_stage.sh s13.
exec bash "$(dirname "$0")/eval_stage.sh" s13
