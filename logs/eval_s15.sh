#!/bin/bash
# Stage-12 offline evaluation: the 64 held-out self-written answers (logs/eval_s8.sh) and the 48 held-out long
# documents (logs/eval_long.sh), for runs/s15a-export and runs/s15-export.
TAG=s15 bash "$(dirname "$0")/eval_s8.sh"
bash "$(dirname "$0")/eval_long.sh" s15 runs/s15a-export runs/s15-export
