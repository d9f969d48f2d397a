"""What quantizing a target costs and gains on this machine, per quantization mode, precision and 4-bit kernel
(`POSS_4BIT_KERNEL`: row-independent or bitsandbytes' fast kernels): plain decoding's tokens/s, the verify forward's
milliseconds at 1, 16 and 60 rows (the target's forward plus its LM head, median of --repeats), and a draft's speed-up
over plain decoding of the same target with whether its outputs equal plain decoding's. Every target is loaded first
and warmed up (each decoder decodes once, untimed); the timed decodes then alternate between the targets prompt by
prompt, so a noisy machine slows them alike. The prompts are the app's examples, never the evaluation sets.

    python scripts/quantized_speed.py [--threads 1] [--max-new-tokens 64] [--rounds 2]      # CPU, float32
    python scripts/quantized_speed.py --device cuda --dtypes bfloat16,float16 --modes none,4bit \\
        --kernels row-independent,fast --draft eagle --json results/quantized.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file from anywhere: the package is beside

import torch

from poss_core.autobudget.timing import measure_forward_curve
from poss_core.decoding.decoder import encode_prompt
from poss_core.models.loading import load_preset_target, parse_dtype
from poss_core.models.presets import DEFAULT_PRESET, get_preset
from poss_core.models.quantization import KERNEL_ENV
from poss_core.rounds.events import DecodeSummary
from poss_core.runtime import methods

EXAMPLES = Path(__file__).resolve().parents[1] / "assets" / "examples" / "prompts.json"
MODES = ("none", "8bit", "4bit")
VERIFY_ROWS = (1, 16, 60)


def timed_decode(decoder, ids: list[int], device: torch.device) -> tuple[list[int], float]:
    """One decode: its tokens and wall seconds (the device synchronised at both ends)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    summary = [x for x in decoder.generate(ids) if isinstance(x, DecodeSummary)][-1]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return list(summary.token_ids), time.perf_counter() - t0


def combos(args) -> list[dict]:
    """Every (mode, dtype, kernel) to measure; the kernel matters for 4-bit only."""
    out = []
    for dtype in args.dtypes.split(","):
        for mode in args.modes.split(","):
            for kernel in args.kernels.split(",") if mode == "4bit" else ["-"]:
                out.append({"mode": mode, "dtype": dtype, "kernel": kernel})
    return out


def load(preset, combo: dict, device: str):
    """The target for a combo, its 4-bit kernels chosen through the environment the loader reads."""
    old = os.environ.get(KERNEL_ENV)
    if combo["kernel"] != "-":
        os.environ[KERNEL_ENV] = combo["kernel"]
    try:
        dtype = parse_dtype(combo["dtype"])
        return load_preset_target(preset.target, quantization=combo["mode"], device=device, dtype=dtype)
    finally:
        if old is None:
            os.environ.pop(KERNEL_ENV, None)
        else:
            os.environ[KERNEL_ENV] = old


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    p = argparse.ArgumentParser(
        prog="python scripts/quantized_speed.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2, help="passes over the example prompts")
    p.add_argument("--modes", default=",".join(MODES), help="quantization modes, comma-separated")
    p.add_argument("--dtypes", default="float32", help="precisions (compute dtypes), comma-separated")
    p.add_argument("--kernels", default="auto", help="4-bit kernels, comma-separated: auto, row-independent, fast")
    p.add_argument("--draft", default=None, help="also decode with this draft: speed-up and identity per target")
    p.add_argument("--repeats", type=int, default=10, help="timings per verify size (the median is kept)")
    p.add_argument("--json", default=None, help="also write the figures here as JSON")
    return p


def prepare_lanes(args, preset, config, warm_prompt: str) -> tuple[list[dict], list[tuple]]:
    """One row per combo, and a lane (row, plain decoder, draft decoder or None, target) per combo that loaded: its
    verify timings measured and each decoder warmed up. A combo that fails is a row with its error."""
    rows: list[dict] = []
    lanes = []
    for combo in combos(args):
        row = {**combo, "error": None}
        rows.append(row)
        try:
            target = load(preset, combo, args.device)
            row["kernel"] = target.kernel or combo["kernel"]
            plain = methods.build_decoder(methods.PLAIN_METHODS[methods.PLAIN], target, config)
            spec = None
            if args.draft:
                method = methods.get_method(preset, args.draft)
                spec = methods.build_decoder(method, target, config, methods.load_draft(method, target, config.depth))
            curve = measure_forward_curve(target, sizes=VERIFY_ROWS, repeats=args.repeats)
            row["verify_ms"] = {n: round(curve.at(n) + curve.post_at(n), 3) for n in VERIFY_ROWS}
            warm = encode_prompt(target.tokenizer, warm_prompt)
            for dec in (plain, spec):  # warm-up, untimed: first-call costs (kernels, caches) out of the figures
                if dec is not None:
                    timed_decode(dec, warm, target.device)
            lanes.append((row, plain, spec, target))
        except Exception as err:  # noqa: BLE001 - one combo failing (e.g. no bitsandbytes) is a row, not the end
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return rows, lanes


def time_lanes(lanes: list[tuple], prompts: list[str], rounds: int) -> None:
    """Decode every prompt on every lane, the lanes taking turns prompt by prompt (who goes first rotates), and fill
    each lane's row with its tokens/s, its draft's speed-up and how many outputs equalled plain decoding's."""
    totals = {id(r): {"plain_t": 0, "plain_s": 0.0, "spec_t": 0, "spec_s": 0.0, "same": 0, "n": 0} for r, *_ in lanes}
    for r in range(rounds):
        for i, prompt in enumerate(prompts):
            k = (i + r) % max(1, len(lanes))
            for row, plain, spec, target in lanes[k:] + lanes[:k]:  # rotate who goes first
                ids = encode_prompt(target.tokenizer, prompt)
                t = totals[id(row)]
                tokens, s = timed_decode(plain, ids, target.device)
                t["plain_t"], t["plain_s"], t["n"] = t["plain_t"] + len(tokens), t["plain_s"] + s, t["n"] + 1
                if spec is not None:
                    got, s2 = timed_decode(spec, ids, target.device)
                    t["spec_t"], t["spec_s"] = t["spec_t"] + len(got), t["spec_s"] + s2
                    t["same"] += got == tokens
    for row, _, spec, _ in lanes:
        t = totals[id(row)]
        row["plain_tokens_per_s"] = round(t["plain_t"] / t["plain_s"], 2) if t["plain_s"] else None
        if spec is not None and t["spec_s"]:
            row["draft_tokens_per_s"] = round(t["spec_t"] / t["spec_s"], 2)
            row["speedup"] = round(row["draft_tokens_per_s"] / row["plain_tokens_per_s"], 3)
            row["identical"] = f"{t['same']}/{t['n']}"


def print_table(args, rows: list[dict], prompts: list[str]) -> None:
    """The settings in one line, then one Markdown row per combo (its error where it failed)."""
    base = {r["dtype"]: r.get("plain_tokens_per_s") for r in rows if r["mode"] == "none"}
    print(
        f"plain decoding of {args.preset} on {args.device}, {len(prompts)} prompts x {args.rounds}, "
        f"{args.max_new_tokens} new tokens, {args.threads} CPU thread(s), warmed up; verify = the target's forward "
        f"plus its LM head over n rows, median of {args.repeats}" + (f"; draft {args.draft}" if args.draft else "")
    )
    head = "| target | precision | 4-bit kernels | plain tokens/s | vs unquantized | verify ms 1 / 16 / 60 rows |"
    print(head + (" draft speed-up | identical to plain |" if args.draft else ""))
    print("|---" * (6 + (2 if args.draft else 0)) + "|")
    for row in rows:
        if row["error"]:
            print(f"| {row['mode']} | {row['dtype']} | {row['kernel']} | {row['error']} |")
            continue
        tps, ref = row.get("plain_tokens_per_s"), base.get(row["dtype"])
        ratio = f"×{tps / ref:.2f}" if tps and ref else "–"
        verify = " / ".join(f"{row['verify_ms'][n]:.2f}" for n in VERIFY_ROWS)
        line = f"| {row['mode']} | {row['dtype']} | {row['kernel']} | {tps} | {ratio} | {verify} |"
        if args.draft:
            line += f" ×{row.get('speedup', float('nan')):.2f} | {row.get('identical', '–')} |"
        print(line)


def main(argv: list[str] | None = None) -> int:
    """Measure every combo, print the table (and write the JSON); 1 when a combo failed."""
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    preset = get_preset(args.preset)
    config = methods.decode_config(preset, max_new_tokens=args.max_new_tokens)
    prompts = [row["prompt"] for row in json.loads(EXAMPLES.read_text())]
    rows, lanes = prepare_lanes(args, preset, config, prompts[0])
    time_lanes(lanes, prompts, args.rounds)
    print_table(args, rows, prompts)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        meta = {k: getattr(args, k) for k in ("preset", "device", "threads", "max_new_tokens", "rounds", "draft")}
        Path(args.json).write_text(json.dumps({"settings": meta, "rows": rows}, indent=1))
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
