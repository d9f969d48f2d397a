"""What quantizing the default target costs on this machine: plain decoding of the same target loaded in full
precision, 8-bit and 4-bit NF4 (bitsandbytes), timed in one run, the modes alternating prompt by prompt so that a
noisy machine slows them alike. Prints tokens/s per mode and its ratio to full precision. The prompts are the app's
examples, never the evaluation sets.

    python scripts/quantized_speed.py [--threads 1] [--max-new-tokens 64] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file from anywhere: the package is beside

import torch

from poss_core import methods
from poss_core.decoding.decoder import encode_prompt
from poss_core.events import DecodeSummary
from poss_core.models.loading import load_preset_target
from poss_core.models.presets import get_preset

EXAMPLES = Path(__file__).resolve().parents[1] / "assets" / "examples" / "prompts.json"
MODES = ("none", "8bit", "4bit")


def plain_tokens_and_seconds(target, config, ids: list[int]) -> tuple[int, float]:
    """One plain decode: new tokens and wall seconds."""
    decoder = methods.build_decoder(methods.PLAIN_METHODS[methods.PLAIN], target, config)
    t0 = time.perf_counter()
    summary = [x for x in decoder.generate(ids) if isinstance(x, DecodeSummary)][-1]
    return len(summary.token_ids), time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python scripts/quantized_speed.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="smollm2-135m")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2, help="passes over the example prompts")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    preset = get_preset(args.preset)
    targets = {m: load_preset_target(preset.target, quantization=m, device="cpu", dtype=torch.float32) for m in MODES}
    config = methods.decode_config(preset, max_new_tokens=args.max_new_tokens)
    prompts = [row["prompt"] for row in json.loads(EXAMPLES.read_text())]
    tokens = {m: 0 for m in MODES}
    seconds = {m: 0.0 for m in MODES}
    for mode in MODES:  # warm-up, untimed
        plain_tokens_and_seconds(
            targets[mode],
            methods.decode_config(preset, max_new_tokens=4),
            encode_prompt(targets[mode].tokenizer, "Hello"),
        )
    for r in range(args.rounds):
        for i, prompt in enumerate(prompts):
            order = MODES[(i + r) % len(MODES) :] + MODES[: (i + r) % len(MODES)]  # rotate who goes first
            for mode in order:
                n, s = plain_tokens_and_seconds(targets[mode], config, encode_prompt(targets[mode].tokenizer, prompt))
                tokens[mode] += n
                seconds[mode] += s
    base = tokens["none"] / seconds["none"]
    print(
        f"plain decoding of {args.preset}, {len(prompts)} prompts x {args.rounds}, {args.max_new_tokens} new tokens, "
        f"{args.threads} thread(s), float32 compute"
    )
    print("| target | plain tokens/s | vs full precision |")
    print("|---|---|---|")
    for mode in MODES:
        tps = tokens[mode] / seconds[mode]
        print(f"| {mode} | {tps:.1f} | ×{tps / base:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
