#!/bin/bash
# Session-10 offline evaluation: stage 7 run to the end (runs/s10-export) and its 9,300-step EAGLE and matched
# control (runs/s10a-export), scored like stages 6 and 7 by logs/eval_s8.sh on the 64 held-out self-written answers
# (never eval/), decoding unroll.
TAG=s10 exec bash "$(dirname "$0")/eval_s8.sh"
