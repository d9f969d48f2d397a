"""What a person opening the demo sees, in numbers: the app's own comparison (lanes racing in time, one thread, the UI's
default settings) on its six example prompts, for each Precision setting; per lane the pooled tokens/s (each lane's
own compute, as the UI counts it), the speed-up over the plain lane and how many of the six answers are identical
to plain decoding, and the slowest whole run (what a person waits for). `--tree shared` is the UI's default (every
draft lane drafts the same tree: the sliders' depth and budget, no depth stop); `--tree fastest` is "Fastest tree
for this machine" (each lane's own fitted budget and depth stop, fitted first, untimed). The examples are the
app's, never the evaluation sets. Quiet machine.

    python scripts/app_speed.py [--precisions auto,bfloat16] [--tree shared|fastest] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file from anywhere: the package is beside

import torch

from app.views.control_defaults import ui_defaults
from poss_core.models.presets import DEFAULT_PRESET, get_preset
from poss_core.rounds import metrics
from poss_core.runtime import compare

EXAMPLES = Path(__file__).resolve().parents[1] / "assets" / "examples" / "prompts.json"


def measure(
    precision: str, prompts: list[str], methods: list[str], preset: str = DEFAULT_PRESET, fastest: bool = False
) -> dict:
    """One comparison per prompt (with `fastest`, calibrating the auto budgets first, untimed), pooled per lane."""
    d = ui_defaults(get_preset(preset))
    spec0 = compare.RunSpec(
        prompts[0],
        methods,
        preset,
        depth=d["depth"],
        top_k=d["top_k"],
        tree_budget=d["tree_budget"],
        max_new_tokens=d["max_new_tokens"],
        auto_budget=fastest,
        precision=precision,
    )
    for _ in compare.fit_budgets(spec0.resolve()):  # the one-time calibration, before any timing
        pass
    compare.run_to_end(
        compare.start(compare.RunSpec("Hello", methods, preset, max_new_tokens=4, precision=precision).resolve())
    )  # warm-up
    events = {m: [] for m in methods}
    tokens = {m: 0 for m in methods}
    seconds = {m: 0.0 for m in methods}
    identical = {m: 0 for m in methods}
    budgets: dict[str, object] = {}
    slowest_run = 0.0
    for prompt in prompts:
        t0 = time.perf_counter()
        comp = compare.run_to_end(
            compare.start(compare.RunSpec.from_json({**spec0.to_json(), "prompt": prompt}).resolve())
        )
        slowest_run = max(slowest_run, time.perf_counter() - t0)
        plain = comp.lane(compare.PLAIN)
        for lane in comp.lanes:
            events[lane.method] += lane.events
            # Per decode: an event's new_tokens counts from the start of its own decode.
            tokens[lane.method] += metrics.total_new_tokens(lane.events)
            seconds[lane.method] += metrics.wall_seconds(lane.events)
            identical[lane.method] += lane.token_ids == plain.token_ids
            budgets[lane.method] = (lane.tree_budget, lane.depth_stop)
    plain_tps = tokens[compare.PLAIN] / seconds[compare.PLAIN]
    rows = {}
    for m in methods:
        tps = tokens[m] / seconds[m]
        rows[m] = {
            "tokens_per_s": round(tps, 1),
            "speedup": round(metrics.speedup(tps, plain_tps), 2),
            "tau": round(metrics.tau(events[m]), 2),
            "identical": f"{identical[m]}/{len(prompts)}",
            "budget": budgets[m][0],
            "depth_stop": budgets[m][1],
        }
    return {"slowest_run_s": round(slowest_run, 1), "lanes": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precisions", default="auto,bfloat16")
    ap.add_argument("--methods", default="plain,eagle,poss2")
    ap.add_argument("--preset", default=DEFAULT_PRESET)
    ap.add_argument("--threads", type=int, default=1, help="torch threads, as `python app.py` sets on 2 cores")
    ap.add_argument(
        "--tree",
        choices=["shared", "fastest"],
        default="shared",
        help="shared: the UI's default, one tree for every lane; fastest: each lane's fitted budget",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    prompts = [e["prompt"] for e in json.loads(EXAMPLES.read_text())]
    for precision in args.precisions.split(","):
        t0 = time.perf_counter()
        result = measure(precision, prompts, args.methods.split(","), args.preset, fastest=args.tree == "fastest")
        print(
            json.dumps(
                {
                    "precision": precision,
                    "tree": args.tree,
                    "threads": args.threads,
                    "prompts": len(prompts),
                    "seconds": round(time.perf_counter() - t0, 1),
                    **result,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
