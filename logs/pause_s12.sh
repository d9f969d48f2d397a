#!/bin/bash
# Session 12: stage 10's training (process ids as arguments) is paused (SIGSTOP) so that stage 9's benchmarks run on a
# quiet machine; once the paper-settings run is done, the --tree-budget auto run follows, then training resumes.
cd "$(dirname "$0")/.."
while ! grep -q "paper s12 done" logs/after_s12.log; do sleep 10; done
bash logs/bench_s12.sh auto; echo "auto s12 done $(date)"
timeout 1200 .venv/bin/python -m pytest -q -x tests > logs/s12-tests.log 2>&1; echo "tests rc=$? $(date)"
kill -CONT "$@"; echo "training resumed $(date)"
