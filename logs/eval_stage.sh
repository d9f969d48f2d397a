#!/bin/bash
# One stage's offline evaluation: the 64 held-out self-written answers (logs/eval_s8.sh) and the 48 held-out long
# documents (logs/eval_long.sh), for runs/TAGa-export and runs/TAG-export: bash logs/eval_stage.sh TAG
[ -n "$1" ] || { echo "usage: $0 TAG" >&2; exit 2; }
TAG=$1 bash "$(dirname "$0")/eval_s8.sh"
bash "$(dirname "$0")/eval_long.sh" "$1" "runs/$1a-export" "runs/$1-export"
