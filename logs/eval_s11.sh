#!/bin/bash
# Session-11 offline evaluation: stage 8 (runs/s11-export) and its 13,600-step EAGLE and matched control
# (runs/s11a-export), scored like stages 6 and 7 by logs/eval_s8.sh on the 64 held-out self-written answers
# (never eval/), decoding unroll.
TAG=s11 exec bash "$(dirname "$0")/eval_s8.sh"
