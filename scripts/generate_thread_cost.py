"""What running transformers' `generate` in a second thread costs on this machine: the same greedy decode timed in
the calling thread and in a new thread, alternating, after the calling thread has used torch's intra-op threads (as
the benchmark's own decoders do). With OpenMP, a second thread's parallel regions can run far slower while the
first thread's team exists, which is why the benchmark runs `plain-hf`, `pld` and `assisted` in its own thread
(`HFGenerateDecoder(in_caller_thread=True)`) and the app, which decodes on one thread, streams them from a worker.

    python scripts/generate_thread_cost.py [--threads 2] [--dtype float32] [--reps 3] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file from anywhere: the package is beside

import torch

from poss_core.decoding.decoder import encode_prompt
from poss_core.models.loading import load_preset_target, parse_dtype
from poss_core.models.presets import DEFAULT_PRESET, get_preset

PROMPT = "Write a short story about a lighthouse keeper."


def tokens_per_s(target, ids: list[int], max_new_tokens: int) -> float:
    x = torch.tensor([ids], device=target.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = target.model.generate(
            x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens, do_sample=False
        )
    return (out.shape[1] - len(ids)) / (time.perf_counter() - t0)


def in_new_thread(fn) -> float:
    box: dict[str, float] = {}
    worker = threading.Thread(target=lambda: box.setdefault("v", fn()))
    worker.start()
    worker.join()
    return box["v"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python scripts/generate_thread_cost.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_preset_target(get_preset(args.preset).target, quantization="none", dtype=parse_dtype(args.dtype))
    ids = encode_prompt(target.tokenizer, PROMPT)
    tokens_per_s(target, ids, 8)  # warm-up in the calling thread (its OpenMP team now exists)
    here, there = [], []
    for _ in range(args.reps):
        here.append(tokens_per_s(target, ids, args.max_new_tokens))
        there.append(in_new_thread(lambda: tokens_per_s(target, ids, args.max_new_tokens)))
    a, b = statistics.median(here), statistics.median(there)
    print(
        f"generate, {args.max_new_tokens} tokens, {args.dtype}, {args.threads} torch threads: calling thread "
        f"{a:.1f} tokens/s, a new thread {b:.1f} tokens/s (median of {args.reps}); new / calling = {b / a:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
