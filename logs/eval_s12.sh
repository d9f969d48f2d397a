#!/bin/bash
# Stage-9 offline evaluation: runs/s12a-export and runs/s12-export on the 64 held-out self-written answers (never
# eval/), decoding unroll, by logs/eval_s8.sh.
TAG=s12 exec bash "$(dirname "$0")/eval_s8.sh"
