#!/bin/bash
# Stage-10 offline evaluation: the 64 held-out self-written answers (logs/eval_s8.sh) and the 48 held-out long
# documents (logs/eval_long.sh), for runs/s13a-export and runs/s13-export.
TAG=s13 bash "$(dirname "$0")/eval_s8.sh"
bash "$(dirname "$0")/eval_long.sh" s13 runs/s13a-export runs/s13-export
