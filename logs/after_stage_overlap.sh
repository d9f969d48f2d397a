#!/bin/bash
# A stage's measurements overlapped with its last training run (sessions 15 and 16; logs/after_stage.sh does the
# same one after another once the whole stage is trained): the held-out scores of EAGLE, POSS-2 and the matched
# control on one thread while POSS-3's b-phase still trains on the other core; the paper-settings benchmark as soon as
# POSS-3 is exported (τ does not depend on timing); POSS-3's held-out scores; then the two timed `auto` benchmarks
# on the quiet machine (SKIP_AUTO=1 leaves them out). Usage: nohup bash logs/after_stage_overlap.sh TAG > logs/after_TAG.log 2>&1 &
tag=${1:?usage: $0 TAG}
cd "$(dirname "$0")/.."
ready() { for m in "$@"; do [ -f runs/$tag-export/$m/config.json ] || return 1; done; }
until ready eagle poss2 matched; do sleep 20; done
METHODS=eagle,poss2,matched THREADS=1 bash logs/eval_stage.sh $tag & early=$!
echo "early scoring started $(date)"
until ready poss3; do sleep 20; done
bash logs/bench_stage.sh $tag paper; echo "paper done $(date)"
wait $early; echo "early scoring done $(date)"
METHODS=poss3 SUFFIX=-poss3 THREADS=2 bash logs/eval_stage.sh $tag; echo "poss3 eval done $(date)"
[ -n "${SKIP_AUTO:-}" ] && exit 0
bash logs/bench_stage.sh $tag auto; echo "auto done $(date)"
AUTO_ARGS="--depth-stop 0" AUTO_SUFFIX=-nostop bash logs/bench_stage.sh $tag auto
echo "auto without a depth stop done $(date)"
