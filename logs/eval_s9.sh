#!/bin/bash
# Session-9 offline evaluation: stage 7 (runs/s9-export) and its 9,300-step EAGLE (runs/s9a-export), scored like
# stage 6 by logs/eval_s8.sh on the 64 held-out self-written answers (never eval/), decoding unroll.
TAG=s9 exec bash "$(dirname "$0")/eval_s8.sh"
