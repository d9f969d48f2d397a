"""The benchmark CLI: τ, pos-acc, feature deviation and wall-clock speed-up of every method on the eval sets.

    python -m poss_core.bench --preset smollm2-135m --methods plain,eagle,poss1,poss2,poss3,matched \\
        --data ../shared/data/eval/*.jsonl [--limit N] [--max-new-tokens 256] [--runs 3] [--temperature 0] \\
        [--depth 6 --top-k 10 --tree-budget 60 | --tree-budget auto] --out results/
    python -m poss_core.bench overhead [--preset tiny-random] [--tree-budget 60] [--rounds 60] [--dtype ...]
    python -m poss_core.bench linear [--draft eagle]   # the draft's matmuls: packed weights against F.linear
    python -m poss_core.bench report results/ [--limit N --out DIR]   # tables and charts again from records.jsonl
    python -m poss_core.bench evidence results/ [--out FILE]   # the Evidence tab's summary (results/evidence.json)

`plain` is plain decoding, timed two ways: the project's PlainDecoder (`plain`)
and transformers' `generate` (`plain-hf`); speed-ups are against the faster of the two on the same run and dataset.
`pld` and `assisted` are transformers' own speculative `generate` (prompt lookup; a smaller model of the preset):
speculative decoding without a trained draft, measured beside EAGLE and POSS (τ and acceptance from accept lengths).
Plain decoding always runs: speed-ups and the identity check need it. Every run warms up first, then goes through the
questions in order, running every method on a question before the next (method order rotated per question), every
turn of multi-turn questions with the method's own earlier answers in context. Timings are mean ± sample std over
runs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from ..base import settings
from ..base.errors import ConfigError, run_cli
from ..base.settings import BOUNDS
from ..decoding.config import DecodeConfig
from ..decoding.hf_generate import STALL_SECONDS
from ..models.loading import load_preset_target, parse_dtype
from ..models.numerics import plain_margin
from ..models.presets import DEFAULT_PRESET, Preset, get_preset
from ..results.analysis import classify_mismatches, first_divergences, identity_check
from ..results.evidence import evidence_main
from ..runtime import methods
from . import runner
from .deviation import deviation_main
from .overhead import linear_main, overhead_main
from .rebuild import report_main
from .report import write_outputs
from .run_meta import load_average, run_meta
from .runner import calibration_texts, load_questions, parse_methods, run_questions, watched_decode
from .stall import StallWatch
from .tables import identity_banner

DEFAULT_METHODS = "plain,eagle,hass,poss1,poss2,poss3,matched"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _add_what_to_run(p)
    _add_auto_budget(p)
    _add_how_to_time(p)
    _add_outputs(p)
    return p


def _add_what_to_run(p: argparse.ArgumentParser) -> None:
    """The preset, methods, questions and runs, and the decoding settings (declared once in `settings`)."""
    p.add_argument(
        "--preset",
        default=DEFAULT_PRESET,
        help="smollm2-135m (default), tiny-random, llama3-8b-instruct, llama2-13b-chat",
    )
    p.add_argument(
        "--methods",
        default=DEFAULT_METHODS,
        help=f"comma-separated: plain (plain decoding), the preset's drafts, oracle "
        f"(the ceiling), pld (transformers' prompt-lookup decoding, no draft model), assisted "
        f"(transformers' assisted generation with the preset's smaller model, where it names one), "
        f"and optionally plain-float32 / plain-bfloat16 / plain-float16 (plain decoding of a second copy "
        f"of the target in that precision, a speed baseline: with --dtype bfloat16, add "
        f"plain-float32) (default {DEFAULT_METHODS})",
    )
    p.add_argument("--data", nargs="+", required=True, help="eval JSONL files or globs; the dataset is the file stem")
    p.add_argument("--limit", type=int, default=None, help="first N questions of each dataset")
    p.add_argument("--runs", type=int, default=3, help="timed runs; tables show mean ± std over runs")
    # The decoding settings, the quantization and --dtype; auto chooses the depth stop and head rows unless given.
    settings.add_flags(
        p,
        settings.BENCH,
        defaults={"max_new_tokens": 256, "depth_stop": None, "head_rows": None},
        tree_budget={
            "type": str,
            "help": "nodes verified per round, root included, or 'auto' "
            "(measure and choose per draft); default: the preset's",
        },
    )


def _add_auto_budget(p: argparse.ArgumentParser) -> None:
    """How `--tree-budget auto` calibrates: on what prompts, over which budgets and depths."""
    p.add_argument("--max-tree-budget", type=int, default=96, help="largest budget 'auto' considers")
    p.add_argument(
        "--calibration-prompts",
        type=int,
        default=6,
        help="'auto': how many calibration prompts to decode (the first N of --calibration-data, else "
        "of the 6 built-in ones; never the evaluation sets, so the budget is not tuned on what is "
        "measured)",
    )
    p.add_argument(
        "--calibration-data",
        nargs="+",
        default=None,
        help="'auto': JSONL or text files of prompts to calibrate on instead of the built-in ones, e.g. "
        "held-out prompts like your workload (eval/ files are refused)",
    )
    p.add_argument(
        "--fixed-depth",
        action="store_true",
        help="'auto': keep --depth; by default auto also considers shallower trees",
    )
    p.add_argument("--calibration-tokens", type=int, default=48)
    p.add_argument("--remeasure", action="store_true", help="'auto': measure the forward-time curve again")


def _add_how_to_time(p: argparse.ArgumentParser) -> None:
    """The plain baselines, the target's attention, the warm-up and the machine: what the timings rest on."""
    p.add_argument("--no-hf-generate", action="store_true", help="time plain decoding with PlainDecoder only")
    p.add_argument(
        "--attention",
        choices=["row-invariant", "sdpa"],
        default=None,
        help="the target's attention: row-invariant (default; every lane exact in every CPU precision) or "
        "transformers' sdpa (a few percent faster; bf16/fp16 lanes may part from plain decoding at near-ties)",
    )
    p.add_argument("--warmup-tokens", type=int, default=16)
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


def _add_outputs(p: argparse.ArgumentParser) -> None:
    """The report's HTML, the progress shown, the stall watch and the output folder."""
    p.add_argument(
        "--plotlyjs",
        choices=["inline", "cdn"],
        default="inline",
        help="inline works offline (the HTML is ~4 MB); cdn keeps it small",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (with a terminal) and no line per finished decode (without one)",
    )
    p.add_argument(
        "--stall-seconds",
        type=float,
        default=STALL_SECONDS,
        help="a decode with no new round (no target forward) for this long ends the run with an error naming the "
        f"method and question, instead of hanging; 0: wait without a bound (default {STALL_SECONDS:g})",
    )
    p.add_argument("--out", default="results", help="output folder")


def _loud(lines: list[str]) -> None:
    bar = "!" * 100
    print("\n" + "\n".join([bar, *[f"!!! {line}" for line in lines], bar]) + "\n", file=sys.stderr, flush=True)


def run_benchmark(args, argv: Sequence[str]) -> int:
    """The whole benchmark: check the arguments, load, warm up, run the questions, check identity, write, report."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.attention:  # read by every TargetModel this process builds (models/row_invariant.use_attention)
        os.environ["POSS_ATTENTION"] = args.attention
    preset, budget = get_preset(args.preset), tree_budget_arg(args)
    base_cfg = base_config(args, preset, budget)
    questions = load_questions(args.data, args.limit)
    # Read before the target loads, so bad calibration input fails fast.
    calibration = calibration_texts(args) if budget == "auto" else []
    names = parse_methods(args.methods, hf_generate=not args.no_hf_generate)
    check_methods(names, preset)

    load_start = load_average()
    if load_start is not None and load_start > 0.5:
        say(
            f"note: the machine is already busy (1-minute load average {load_start:.1f} on {os.cpu_count()} cores): "
            f"timings will be slow and noisy; with other work running, --threads 1 avoids thread contention."
        )
    say(f"loading {preset.name} ...")
    target = load_preset_target(
        preset.target, quantization=args.quantization, device=args.device, dtype=parse_dtype(args.precision)
    )
    lanes = runner.make_lanes(args, preset, target, names, base_cfg, say, calibration)
    for lane in lanes:
        if hasattr(lane.decoder, "stall_s"):  # transformers' generate: its own wait for a round has the same bound
            lane.decoder.stall_s = args.stall_seconds or None
    tokens = min(args.warmup_tokens, args.max_new_tokens)
    progress = not args.no_progress
    with StallWatch(args.stall_seconds) as watch:
        say(f"warming up {len(lanes)} methods ({', '.join(m.name for m in lanes)}), {tokens} tokens each ...")
        warm_up(lanes, runner.warm_up_prompt(target, questions, args.max_new_tokens), tokens, watch, progress)
        records, skipped = run_questions(lanes, target, questions, args.runs, progress=progress, watch=watch)
    for line in skipped:
        say(f"skipped {line}")
    identity = check_identity(records, target, args.temperature)
    meta = run_meta(args, argv, preset, target, lanes, questions, base_cfg, budget, skipped, load_start)
    paths = write_outputs(
        Path(args.out), records, meta, base_cfg.depth, identity, plotlyjs=True if args.plotlyjs == "inline" else "cdn"
    )
    _print_console(json.loads(paths["summary"].read_text()), meta)
    say("wrote " + ", ".join(str(p) for p in paths.values()))
    if identity["mismatches"]:
        _loud(
            [identity_banner(identity)]
            + [
                f"{m['method']} run {m['run']} {m['dataset']}/{m['question_id']} turn {m['turn']}: first difference at "
                f"token {m['index']} (got {m['got']}, plain {m['want']}; plain logit margin "
                f"{m.get('margin', float('nan')):.4g})"
                for m in identity["mismatches"][:10]
            ]
        )
        return 3
    say(identity_banner(identity))
    return 0


def say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def tree_budget_arg(args) -> int | str:
    """--tree-budget as an integer or "auto" (None: the preset's); checks --runs and --limit too."""
    if args.runs < 1:
        raise ConfigError(f"--runs={args.runs} is out of range: use an integer >= 1.")
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit={args.limit} is out of range: use an integer >= 1.")
    for flag in ("warmup_tokens", "calibration_tokens"):
        value, (lo, hi) = getattr(args, flag), BOUNDS["max_new_tokens"]
        if not lo <= value <= hi:
            raise ConfigError(f"--{flag.replace('_', '-')}={value} is out of range: use an integer from {lo} to {hi}.")
    if not args.stall_seconds >= 0:  # also refuses NaN
        raise ConfigError(f"--stall-seconds={args.stall_seconds} is out of range: use seconds >= 0 (0: no bound).")
    lo, hi = BOUNDS["tree_budget"]
    if not lo <= args.max_tree_budget <= hi:
        raise ConfigError(
            f"--max-tree-budget={args.max_tree_budget} is out of range: use an integer from {lo} to {hi}."
        )
    if args.tree_budget is None or str(args.tree_budget).lower() == "auto":
        return "auto" if args.tree_budget is not None else get_preset(args.preset).tree_budget
    try:
        return int(args.tree_budget)
    except ValueError as err:
        raise ConfigError(f"--tree-budget={args.tree_budget!r}: use an integer >= 2 or 'auto'.") from err


def base_config(args, preset: Preset, budget: int | str) -> DecodeConfig:
    """Every lane's settings before `auto` fits a draft's: the flags, else the preset's tree."""
    values = settings.decoding(settings.from_flags(args, settings.BENCH))
    values["tree_budget"] = budget if isinstance(budget, int) else None  # auto: the preset's until a fit
    return methods.decode_config(preset, **values)


def check_methods(names: Sequence[str], preset: Preset) -> None:
    """Refuse an unknown method before anything loads (and `assisted` where the preset has no smaller model)."""
    for n in names:
        if n == methods.ASSISTED:
            methods.get_method(preset, n)  # ConfigError: why there is none and what to use
        if methods.uses_draft(n) and n not in preset.drafts and not n.startswith("random:"):
            raise ConfigError(
                f"method {n!r} is not {methods.PLAIN}, {', '.join(methods.OTHER_PRECISION_PLAIN)}, "
                f"{methods.ORACLE}, {', '.join(methods.TRAINING_FREE)} or one of preset "
                f"{preset.name!r}'s drafts "
                f"({', '.join(preset.drafts)})."
            )


def warm_up(
    lanes: Sequence[runner.BenchLane],
    ids: list[int],
    tokens: int,
    watch: StallWatch | None = None,
    progress: bool | str = True,
) -> None:
    """Every method decodes the first prompt that fits once, untimed (a line each without a terminal)."""
    lines = runner.progress_mode(progress) == "lines"
    for lane in lanes:
        got, _, _, wall, _ = watched_decode(watch, runner.with_max_tokens(lane, tokens), ids, "the warm-up prompt")
        if lines:
            say(f"warm-up {lane.name}: {len(got)} tokens in {wall:.2f} s")


def check_identity(records, target, temperature: float) -> dict:
    """At temperature 0 every method must reproduce plain decoding: compare, and tell rounding near-ties (measured on
    the plain target's logits where a method first differs) from real mismatches."""
    if temperature != 0:
        return {
            "reference": None,
            "checked": 0,
            "mismatches": [],
            "near_ties": [],
            "skipped": f"temperature {temperature} > 0 (outputs are samples; losslessness is tested "
            f"statistically in tests/)",
        }
    identity = identity_check(records)
    by_key = {(r.method, r.key): r for r in records}
    for mm in first_divergences(identity["mismatches"]).values():
        rec = by_key[(identity["reference"], (mm["run"], mm["dataset"], mm["question_id"], mm["turn"]))]
        mm["margin"] = plain_margin(target, rec.prompt_ids, rec.token_ids, mm["index"], mm["got"])
    numerics = target.numerics
    # Row-invariant numerics (tolerance 0) leave no rounding to explain a difference, in the engine's lanes and in
    # transformers' generate alike (its calls are padded the same way: row_invariant.pad_small_calls).
    return {
        **classify_mismatches(identity, numerics.tolerance, str(target.dtype).replace("torch.", "")),
        "quantization": target.quantization,
        "attention": getattr(target, "attention", "sdpa"),
        "numerics": numerics.why,
    }


def _print_console(agg: dict, meta: dict) -> None:
    """The overall table on stdout: method, τ, tokens/s, speed-up, time split."""

    def f(v, d=2):
        return "–" if v is None else f"{v:.{d}f}"

    print(f"\n{meta['preset']} | {meta['settings']} | tree budget {meta['budget']}")
    oracle = agg.get("oracle")
    print(
        f"{'method':<10} {'tau':>6} {'tau/set':>8} {'tok/s':>16} {'speed-up':>16} {'draft ms':>9} "
        f"{'verify ms':>10} {'overhead ms':>12}" + (f" {'of oracle':>10}" if oracle else "")
    )
    for m in agg["methods"]:
        c = agg["table"][m]["overall"]
        tps = f"{f(c['tokens_per_s'], 1)} ± {f(c['tokens_per_s_std'], 1)}"
        sp = f"{f(c['speedup'])} ± {f(c['speedup_std'])}"
        print(
            f"{m:<10} {f(c['tau_pooled']):>6} {f(agg['mean_tau_over_datasets'][m]):>8} {tps:>16} {sp:>16} "
            f"{f(c['draft_ms']):>9} {f(c['verify_ms']):>10} {f(c['overhead_ms']):>12}"
            + (f" {f(c.get('oracle_fraction')):>10}" if oracle else "")
        )
    print(
        "tau = pooled over every round; tau/set = the mean of the datasets' tau (the paper's mean column)"
        + ("; of oracle = tokens/s ÷ the oracle's (its speed-up is the ceiling at these settings)" if oracle else "")
    )
    print()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        if argv and argv[0] == "overhead":
            return overhead_main(argv[1:])
        if argv and argv[0] == "linear":
            return linear_main(argv[1:])
        if argv and argv[0] == "report":
            return report_main(argv[1:])
        if argv and argv[0] == "evidence":
            return evidence_main(argv[1:])
        if argv and argv[0] == "deviation":
            return deviation_main(argv[1:])
        return run_benchmark(build_parser().parse_args(argv), argv)

    return run_cli(body)
