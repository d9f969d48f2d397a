"""Row-invariant attention against transformers' sdpa, side by side in one run: the same target loaded twice (one
per attention), the same drafts and prompts, every method run on a prompt under both before the next prompt (their
order alternating), so machine noise falls on both alike. Prints, per attention, plain decoding's tokens/s against
transformers' own `generate` (stock sdpa), each draft lane's speed-up over its own plain decoding, and how many
turns are token-for-token identical to plain decoding.

    python scripts/exact_speed.py [--dtype bfloat16] [--methods eagle,poss2] [--limit 2] [--max-new-tokens 96]
        [--depth 6 --top-k 8 --tree-budget 32] [--threads N] [--out results/exact-speed.json]

Prompts are the first --limit questions (first turn) of each evaluation set in ../shared/data/eval; nothing is tuned
on them."""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from poss_core.bench.runner import load_questions  # noqa: E402
from poss_core.decoding.config import DecodeConfig  # noqa: E402
from poss_core.decoding.decoder import encode_prompt  # noqa: E402
from poss_core.models.hardware import device_description  # noqa: E402
from poss_core.models.loading import load_preset_target, parse_dtype  # noqa: E402
from poss_core.models.presets import DEFAULT_PRESET, get_preset  # noqa: E402
from poss_core.rounds.events import DecodeSummary  # noqa: E402
from poss_core.runtime import methods  # noqa: E402

ATTENTIONS = ("sdpa", "row-invariant")
ROOT = Path(__file__).resolve().parent.parent


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--methods", default="eagle,poss2", help="draft lanes (plain decoding always runs)")
    p.add_argument("--data", nargs="*", default=sorted(glob.glob(str(ROOT.parent / "shared/data/eval/*.jsonl"))))
    p.add_argument("--limit", type=int, default=2, help="questions per evaluation set")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--tree-budget", type=int, default=32)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: seconds elapsed; cpu: this process's CPU seconds (with --threads 1, next to unmoved by other "
        "work on a busy machine)",
    )
    p.add_argument("--out", default="results/exact-speed.json")
    return p


CLOCK = time.perf_counter  # main() sets it from --clock


def decode(decoder, ids: list[int]) -> tuple[list[int], float]:
    """Token ids and seconds of one decode."""
    t0 = CLOCK()
    summary = None
    for item in decoder.generate(ids):
        summary = item
    assert isinstance(summary, DecodeSummary)
    return summary.token_ids, CLOCK() - t0


def stock_generate(target, ids: list[int], n: int) -> tuple[list[int], float]:
    """transformers' own greedy `generate` (for the sdpa target: stock transformers), cut at EOS."""
    x = torch.tensor([ids])
    t0 = CLOCK()
    with torch.inference_mode():
        out = target.model.generate(
            x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False, pad_token_id=0
        )[0, len(ids) :].tolist()
    wall = CLOCK() - t0
    cut = next((i + 1 for i, t in enumerate(out) if t in target.eos_ids), len(out))
    return out[:cut], wall


def load_lanes(args, preset, dtype, cfg: DecodeConfig) -> dict[str, dict]:
    """Per attention: the target loaded with it, its plain decoder and one decoder per draft method."""
    lanes: dict[str, dict] = {}
    for attention in ATTENTIONS:
        os.environ["POSS_ATTENTION"] = attention  # read by the TargetModel load_preset_target builds
        target = load_preset_target(preset.target, dtype=dtype)
        drafts = {}
        for name in args.methods.split(","):
            method = methods.get_method(preset, name)
            drafts[name] = methods.build_decoder(method, target, cfg)
        lanes[attention] = {
            "target": target,
            "plain": methods.build_decoder(methods.get_method(preset, "plain"), target, cfg),
            "drafts": drafts,
        }
    return lanes


def race(lanes: dict[str, dict], prompts: list[str], max_new_tokens: int) -> tuple[dict, dict, dict]:
    """Every method on a prompt under both attentions before the next prompt (their order alternating), after an
    untimed warm-up: seconds and tokens per (attention, method), and turns identical to plain decoding."""
    walls: dict[tuple[str, str], list[float]] = {}
    tokens: dict[tuple[str, str], list[int]] = {}
    identical: dict[tuple[str, str], int] = {}
    tokenizer = lanes["sdpa"]["target"].tokenizer
    warm = encode_prompt(tokenizer, prompts[0])
    for lane in lanes.values():  # untimed: first calls allocate caches and pick kernels
        for decoder in [lane["plain"], *lane["drafts"].values()]:
            decode(decoder, warm)
        stock_generate(lane["target"], warm, 8)

    def record(key: tuple[str, str], got: list[int], wall: float, plain_ids: list[int] | None = None) -> None:
        walls.setdefault(key, []).append(wall)
        tokens.setdefault(key, []).append(len(got))
        if plain_ids is not None:
            identical[key] = identical.get(key, 0) + (got == plain_ids)

    for i, prompt in enumerate(tqdm(prompts, desc="prompts", unit="prompt")):
        ids = encode_prompt(tokenizer, prompt)
        order = ATTENTIONS if i % 2 == 0 else ATTENTIONS[::-1]
        for attention in order:
            lane = lanes[attention]
            plain_ids, wall = decode(lane["plain"], ids)
            record((attention, "plain"), plain_ids, wall)
            got, wall = stock_generate(lane["target"], ids, max_new_tokens)
            record((attention, "generate"), got, wall, plain_ids)
            for name, decoder in lane["drafts"].items():
                got, wall = decode(decoder, ids)
                record((attention, name), got, wall, plain_ids)
    return walls, tokens, identical


def table_lines(args, report: dict, rate: dict, identical: dict, walls: dict, drafts: list[str]) -> list[str]:
    """The printed table: per attention and method its tokens/s against plain and stock generate, then the drafts'
    speed-ups under each attention and row-invariant plain decoding against stock generate."""
    prompts = report["prompts"]
    lines = [
        f"{prompts} prompts, {args.dtype}, depth {args.depth}, top-k {args.top_k}, budget {args.tree_budget}, "
        f"{args.max_new_tokens} new tokens; {report['machine']}; {args.clock} clock",
        f"{'attention':<14} {'method':<10} {'tokens/s':>9} {'vs plain':>9} {'vs stock generate':>18} {'identical':>10}",
    ]
    stock = rate[("sdpa", "generate")]
    for attention in ATTENTIONS:
        plain = rate[(attention, "plain")]
        for name in ["plain", "generate", *drafts]:
            r = rate[(attention, name)]
            same = "" if name == "plain" else f"{identical[(attention, name)]}/{prompts}"
            lines.append(f"{attention:<14} {name:<10} {r:>9.2f} {r / plain:>8.2f}x {r / stock:>17.2f}x {same:>10}")
    for name in drafts:
        before = rate[("sdpa", name)] / rate[("sdpa", "plain")]
        after = rate[("row-invariant", name)] / rate[("row-invariant", "plain")]
        lines.append(f"{name}: speed-up over plain ×{before:.2f} with sdpa, ×{after:.2f} row-invariant")
    lines.append(
        f"row-invariant plain decoding at {rate[('row-invariant', 'plain')] / stock:.3f}x stock generate's speed "
        f"(median {args.clock} seconds per prompt: {statistics.median(walls[('row-invariant', 'plain')]):.2f} against "
        f"{statistics.median(walls[('sdpa', 'generate')]):.2f})"
    )
    return lines


def main(argv: list[str] | None = None) -> None:
    """Load both targets, race them on the prompts, print the table and write the JSON report."""
    global CLOCK
    args = build_parser().parse_args(argv)
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    preset, dtype = get_preset(args.preset), parse_dtype(args.dtype)
    cfg = DecodeConfig(
        depth=args.depth, top_k=args.top_k, tree_budget=args.tree_budget, max_new_tokens=args.max_new_tokens
    )
    lanes = load_lanes(args, preset, dtype, cfg)
    prompts = [q.turns[0] for q in load_questions(args.data, args.limit)]
    walls, tokens, identical = race(lanes, prompts, args.max_new_tokens)
    rate = {key: sum(tokens[key]) / sum(walls[key]) for key in walls}
    report = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "machine": device_description(lanes["sdpa"]["target"].device),
        "dtype": args.dtype,
        "clock": args.clock,
        "prompts": len(prompts),
        "tokens_per_s": {f"{a}/{m}": round(v, 2) for (a, m), v in rate.items()},
        "identical_turns": {f"{a}/{m}": n for (a, m), n in identical.items()},
    }
    lines = table_lines(args, report, rate, identical, walls, list(lanes["sdpa"]["drafts"]))
    print("\n".join(lines))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({**report, "table": lines}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
