#!/bin/bash
# Stage-11 offline evaluation (runs/s14a-export, runs/s14-export): logs/eval_stage.sh s14.
exec bash "$(dirname "$0")/eval_stage.sh" s14
