"""What loading a large results file costs the Evidence tab: builds a synthetic records.jsonl (by default 16 methods
x 2,000 questions, one run, a prefill and two rounds each, inside every size limit of `load_evidence`) and times
`poss_core.results.evidence.load_evidence` on it, wall clock and CPU seconds of this process, with the split between
parsing the rows and building the summary (the bootstrap intervals among it). With --compare PRESET it also times a
small comparison (plain and EAGLE at RunSpec's default tree, --compare-tokens new tokens) alone, then while
the load runs in another thread of the same process, then while it runs in the app's worker process (`load_apart`):
what a live run loses to a load.

    python scripts/evidence_load_cost.py [--methods 16] [--questions 2000] [--datasets 6] [--rounds 2] [--keep DIR]
        [--compare smollm2-135m [--compare-tokens 32] [--threads N]]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file from anywhere: the package is beside

from poss_core.results import evidence  # noqa: E402

BASE_METHODS = ["plain", "plain-hf", "eagle", "poss1", "poss2", "poss3", "matched", "oracle", "pld"]


def method_names(count: int) -> list[str]:
    """`count` method names: the registry's own first, then numbered draft methods."""
    return (BASE_METHODS + [f"draft{i}" for i in range(count)])[:count]


def record(method: str, dataset: str, qid: int, rounds: int, depth: int, rng: random.Random) -> dict:
    """One benchmark row in records.jsonl's layout: a prefill round, then `rounds` draft rounds."""
    plain = method.startswith("plain")
    accept = [0] + [0 if plain else rng.randint(0, depth) for _ in range(rounds)]
    made, new_tokens = 0, []
    for a in accept:
        made += a + 1
        new_tokens.append(made)
    nodes = [[]] + [
        [] if plain else [[7, k - 1, k, -float(k), 0.5, 0] for k in range(1, depth + 1)] for _ in range(rounds)
    ]
    # Only the fields the loader requires (the optional ones, such as text, default when absent).
    return {
        "run": 0,
        "method": method,
        "dataset": dataset,
        "question_id": qid,
        "turn": 0,
        "token_ids": list(range(made)),
        "wall_time": 0.1,
        "rounds": {
            "prefill": [True] + [False] * rounds,
            "accept_len": accept,
            "new_tokens": new_tokens,
            "draft_ms": [0.0] + [1.0] * rounds,
            "verify_ms": [2.0] * (rounds + 1),
            "wall_ms": [4.0] * (rounds + 1),
            "feature_deviation": [[[0.5, 0.1]] * a for a in accept],
            "nodes": nodes,
        },
    }


def write_records(path: Path, methods: int, questions: int, datasets: int, rounds: int, depth: int) -> Path:
    """records.jsonl with every method answering every question once (questions split evenly over datasets)."""
    rng = random.Random(0)
    with open(path, "w") as f:
        for m in method_names(methods):
            for q in range(questions):
                f.write(
                    json.dumps(record(m, f"set{q % datasets}", q, rounds, depth, rng), separators=(",", ":")) + "\n"
                )
    return path


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def time_compare(preset: str, tokens: int) -> float:
    """Wall seconds of one comparison (plain and EAGLE, a fixed tree) from start to its last round."""
    from poss_core.runtime import compare

    spec = compare.RunSpec("Write a short poem about the sea.", ["plain", "eagle"], preset, max_new_tokens=tokens)
    start = time.perf_counter()
    compare.run_to_end(compare.start(spec.resolve()))
    return time.perf_counter() - start


def beside(load, preset: str, tokens: int) -> tuple[float, float]:
    """(comparison seconds, load seconds) with `load()` started in a thread just before the comparison."""
    done: dict[str, float] = {}

    def timed() -> None:
        t0 = time.perf_counter()
        load()
        done["load"] = time.perf_counter() - t0

    loader = threading.Thread(target=timed)
    loader.start()
    time.sleep(0.2)
    seconds = time_compare(preset, tokens)
    loader.join()
    return seconds, done["load"]


def compare_during_load(path: Path, preset: str, tokens: int) -> None:
    """The comparison alone, then beside `load_evidence(path)` in this process (a thread, as the app's handlers ran
    it before) and, where this checkout has it, beside the app's `load_apart` (a worker process,
    `poss_core.results.loading`)."""
    time_compare(preset, tokens)  # loads the models and warms up, untimed
    print(f"comparison ({preset}, plain and EAGLE, {tokens} tokens): {time_compare(preset, tokens):.2f} s alone")
    loads = [("in a thread of this process", lambda: evidence.load_evidence(path))]
    try:
        from poss_core.results.loading import load_apart, run_apart

        run_apart(time.sleep, 0)  # starts the worker's server (it imports the loader once), untimed
        loads.append(("in the app's worker process", lambda: load_apart(path)))
    except ImportError:
        print("(this checkout has no poss_core.results.loading.load_apart: loads run in the serving process)")
    for where, load in loads:
        seconds, took = beside(load, preset, tokens)
        print(f"comparison: {seconds:.2f} s beside a load {where} (the load took {took:.1f} s wall)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", type=int, default=16)
    p.add_argument("--questions", type=int, default=2000)
    p.add_argument("--datasets", type=int, default=6)
    p.add_argument("--rounds", type=int, default=2, help="draft rounds per record (after the prefill)")
    p.add_argument("--depth", type=int, default=2, help="drafted depth of every round")
    p.add_argument("--keep", default=None, help="write the file into this folder and keep it")
    p.add_argument(
        "--compare",
        default=None,
        metavar="PRESET",
        help="also time a small comparison on this preset alone and beside the load",
    )
    p.add_argument("--compare-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=None, help="torch threads for the comparison (the app's --threads)")
    args = p.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="evidence-cost-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = write_records(folder / "records.jsonl", args.methods, args.questions, args.datasets, args.rounds, args.depth)
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MB, {args.methods} methods x {args.questions} questions")

    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    records = evidence.parse_records(path.read_text(), path.name)
    wall1, cpu1 = time.perf_counter(), cpu_seconds()
    evidence.load_evidence(path)  # parses again, then builds the summary
    wall2, cpu2 = time.perf_counter(), cpu_seconds()
    parse_wall, parse_cpu = wall1 - wall0, cpu1 - cpu0
    print(f"parse rows ({len(records)} records): {parse_wall:.1f} s wall, {parse_cpu:.1f} s CPU")
    print(
        f"load_evidence (parse + summary): {wall2 - wall1:.1f} s wall, {cpu2 - cpu1:.1f} s CPU "
        f"(summary alone about {wall2 - wall1 - parse_wall:.1f} s wall)"
    )
    if args.compare:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        compare_during_load(path, args.compare, args.compare_tokens)
    if not args.keep:
        path.unlink()
        folder.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
