#!/bin/bash
# Stage-11 offline evaluation: the 64 held-out self-written answers (logs/eval_s8.sh) and the 48 held-out long
# documents (logs/eval_long.sh), for runs/s14a-export and runs/s14-export.
TAG=s14 bash "$(dirname "$0")/eval_s8.sh"
bash "$(dirname "$0")/eval_long.sh" s14 runs/s14a-export runs/s14-export
