"""The benchmark CLI: τ, pos-acc, feature deviation and wall-clock speed-up of every method on the eval sets.

    python -m poss_core.bench --preset smollm2-135m --methods ar,eagle,poss1,poss2,poss3,matched \\
        --data ../shared/data/eval/*.jsonl [--limit N] [--max-new-tokens 256] [--runs 3] [--temperature 0] \\
        [--depth 6 --top-k 10 --tree-budget 60 | --tree-budget auto] --out results/
    python -m poss_core.bench overhead [--preset tiny-random] [--tree-budget 60] [--rounds 60] [--dtype ...]
    python -m poss_core.bench report results/        # tables and charts again from results/records.jsonl

`ar` is plain decoding, timed two ways: the project's PlainDecoder (`ar`) and transformers' `generate` (`ar-hf`);
speed-ups are against the faster of the two on the same run and dataset. Plain decoding always runs: speed-ups and
the identity check need it. Every run warms up first, then goes through the questions in order, running every
method on a question before the next (method order rotated per question), every turn of multi-turn questions
with the method's own earlier answers in context. Timings are mean ± sample std over runs."""

from __future__ import annotations

import argparse
import copy
import gc
import glob
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .errors import ConfigError, PossError, run_cli

DEFAULT_METHODS = "ar,eagle,poss1,poss2,poss3,matched"


@dataclass
class Question:
    dataset: str
    question_id: Any
    category: str
    turns: list[str]


@dataclass
class Method:
    """One lane of the benchmark: a name, a label, and how it decodes (decoder None = transformers `generate`)."""

    name: str
    label: str
    decoder: Any = None
    budget: int | None = None
    budget_choice: Any = None
    notes: list[str] = field(default_factory=list)


# ----- inputs ----------------------------------------------------------------------------------------------------
def data_files(patterns: Sequence[str]) -> list[str]:
    """The files --data names (globs expanded, each once, in order)."""
    paths: list[str] = []
    for p in patterns:
        found = sorted(glob.glob(p)) or ([p] if Path(p).is_file() else [])
        if not found:
            raise ConfigError(f"--data {p!r} matches no file: give eval JSONL files (e.g. ../shared/data/eval/*.jsonl).")
        paths.extend(found)
    return list(dict.fromkeys(paths))


def load_questions(patterns: Sequence[str], limit: int | None = None) -> list[Question]:
    """Rows {"question_id", "category", "turns": [...]} from JSONL files; the dataset is the file's stem."""
    questions: list[Question] = []
    for path in data_files(patterns):
        name = Path(path).stem
        rows = 0
        with open(path) as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                if limit is not None and rows >= limit:
                    break
                try:
                    row = json.loads(line)
                    turns = [str(t) for t in row["turns"]]
                except (ValueError, KeyError, TypeError) as err:
                    raise ConfigError(f"{path}:{line_no} is not an eval row with 'turns' ({err}).") from err
                questions.append(Question(name, row.get("question_id", rows), str(row.get("category", "")), turns))
                rows += 1
    if not questions:
        raise ConfigError("--data holds no questions.")
    return questions


def parse_methods(text: str, hf_generate: bool = True) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    if "ar-hf" in names:
        names.remove("ar-hf")
    if "ar" in names:
        names.remove("ar")
    plain = ["ar", "ar-hf"] if hf_generate else ["ar"]
    return plain + list(dict.fromkeys(names))


# ----- decoding one turn -----------------------------------------------------------------------------------------
class _TokenClock:
    """A transformers streamer that stamps the time each new token arrives (the first call carries the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.tokens: list[int] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.times.append(time.perf_counter())
        self.tokens.extend(int(t) for t in value.reshape(-1).tolist())

    def end(self) -> None:
        pass


def hf_generate(target, ids: list[int], max_new_tokens: int, temperature: float, top_p: float, seed: int):
    """transformers' own `generate` (batch 1, KV cache): token ids cut after the first EOS, and one event per token
    from the streamer's timestamps (time to the first token = the prefill round)."""
    import torch

    from .decoding.events import RoundEvent

    x = torch.tensor([ids], device=target.device)
    eos = sorted(target.eos_ids) or None
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else (eos[0] if eos else 0)
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "eos_token_id": eos, "pad_token_id": pad}
    if temperature > 0:
        kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
    else:
        kwargs.update(do_sample=False)
    clock = _TokenClock()
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = target.model.generate(x, attention_mask=torch.ones_like(x), streamer=clock, **kwargs)
    wall = time.perf_counter() - t0
    tokens = out[0, len(ids):].tolist()
    for i, t in enumerate(tokens):
        if t in target.eos_ids:
            tokens = tokens[: i + 1]
            break
    events, prev = [], t0
    for i, stamp in enumerate(clock.times[: len(tokens)]):
        ms = (stamp - prev) * 1000.0
        prev = stamp
        events.append(RoundEvent(round=i, nodes=[], accepted=[], bonus=tokens[i], target_probs=[],
                                 feature_deviation=[], draft_ms=0.0, verify_ms=ms, new_tokens=i + 1,
                                 tokens=[tokens[i]], wall_ms=ms, prefill=i == 0))
    text = target.tokenizer.decode(tokens, skip_special_tokens=True)
    stop = "eos" if tokens and tokens[-1] in target.eos_ids else "max_new_tokens"
    return tokens, text, stop, wall, events


def decode_turn(method: Method, target, ids: list[int], cfg) -> tuple[list[int], str, str, float, list]:
    """Run one decode; return (token ids, text, stop reason, wall seconds, light events). The wall time is taken
    around the whole call; what the rounds' own wall_ms do not cover (set-up, the closing summary) is booked as
    overhead of the last round, so tokens/s from events equals new tokens over this wall time."""
    from .bench_report import light_event
    from .decoding.events import DecodeSummary

    if method.decoder is None:
        tokens, text, stop, wall, events = hf_generate(target, ids, cfg.max_new_tokens, cfg.temperature, cfg.top_p,
                                                       cfg.seed)
    else:
        events, summary = [], None
        t0 = time.perf_counter()
        for item in method.decoder.generate(ids):
            if isinstance(item, DecodeSummary):
                summary = item
            else:
                events.append(light_event(item))
        wall = time.perf_counter() - t0
        tokens, text, stop = summary.token_ids, summary.text, summary.stop_reason
    if events:
        rest = wall * 1000.0 - sum(e.wall_ms for e in events)
        if rest > 0:
            events[-1].wall_ms += rest
    return tokens, text, stop, wall, events


# ----- set-up ----------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from .models.loading import add_dtype_argument  # torch is loaded by every run anyway

    p = argparse.ArgumentParser(prog="python -m poss_core.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="smollm2-135m", help="smollm2-135m (default), tiny-random, llama3-8b-instruct, "
                                                            "llama2-13b-chat")
    p.add_argument("--methods", default=DEFAULT_METHODS,
                   help=f"comma-separated: ar (plain decoding), the preset's drafts, and optionally ar-float32 / "
                        f"ar-bfloat16 / ar-float16 (plain decoding of a second copy of the target in that precision, "
                        f"a speed baseline: with --dtype bfloat16, add ar-float32) (default {DEFAULT_METHODS})")
    p.add_argument("--data", nargs="+", required=True, help="eval JSONL files or globs; the dataset is the file stem")
    p.add_argument("--limit", type=int, default=None, help="first N questions of each dataset")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--runs", type=int, default=3, help="timed runs; tables show mean ± std over runs")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--depth", type=int, default=None, help="draft positions per round (default: the preset's)")
    p.add_argument("--top-k", type=int, default=None, help="default: the preset's")
    p.add_argument("--tree-budget", default=None,
                   help="tokens verified per round, root included, or 'auto' (measure and choose per draft); "
                        "default: the preset's")
    p.add_argument("--max-tree-budget", type=int, default=96, help="largest budget 'auto' considers")
    p.add_argument("--depth-stop", type=float, default=None,
                   help="dynamic depth: stop drafting deeper once the best path's draft probability is below this "
                        "(0 = never; default 0, and with 'auto' the stop auto chooses)")
    p.add_argument("--head-rows", choices=["read", "all"], default=None,
                   help="tree slots the target's LM head reads: the ones verification needs (a leaf's row in a "
                        "second call when acceptance ends there), or all of them in one call (default: read, or "
                        "what 'auto' finds cheaper)")
    p.add_argument("--calibration-prompts", type=int, default=6,
                   help="'auto': how many calibration prompts to decode (the first N of --calibration-data, else "
                        "of the 6 built-in ones; never the evaluation sets, so the budget is not tuned on what is "
                        "measured)")
    p.add_argument("--calibration-data", nargs="+", default=None,
                   help="'auto': JSONL or text files of prompts to calibrate on instead of the built-in ones, e.g. "
                        "held-out prompts like your workload (eval/ files are refused)")
    p.add_argument("--fixed-depth", action="store_true",
                   help="'auto': keep --depth; by default auto also considers shallower trees")
    p.add_argument("--calibration-tokens", type=int, default=48)
    p.add_argument("--remeasure", action="store_true", help="'auto': measure the forward-time curve again")
    p.add_argument("--no-hf-generate", action="store_true", help="time plain decoding with PlainDecoder only")
    p.add_argument("--warmup-tokens", type=int, default=16)
    p.add_argument("--quantization", choices=["auto", "none", "8bit", "4bit"], default="auto")
    add_dtype_argument(p)
    p.add_argument("--device", default=None)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--plotlyjs", choices=["inline", "cdn"], default="inline",
                   help="inline works offline (the HTML is ~4 MB); cdn keeps it small")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", default="results", help="output folder")
    return p


def _hardware(target) -> str:
    from .decoding.autobudget import device_description

    return device_description(target.device) + f", {platform.system()} {platform.machine()}"


def calibration_texts(args: argparse.Namespace) -> list[str]:
    """The prompts `auto` calibrates on: the first --calibration-prompts of --calibration-data, else the built-in
    ones. Never the evaluation sets: a budget fitted on what is measured would flatter the speed-up."""
    from .decoding.autobudget import CALIBRATION_PROMPTS
    from .training.data import read_prompts

    if args.calibration_prompts < 1:
        raise ConfigError(f"--calibration-prompts={args.calibration_prompts} is out of range: use an integer >= 1.")
    if not args.calibration_data:
        return list(CALIBRATION_PROMPTS[: args.calibration_prompts])
    calibration = {Path(f).resolve() for q in args.calibration_data for f in (glob.glob(q) or [q])}
    if calibration & {Path(d).resolve() for d in data_files(args.data)}:
        raise ConfigError("--calibration-data names a file that --data measures: calibrate on other prompts.")
    texts = read_prompts(args.calibration_data)
    if not texts:
        raise ConfigError(f"--calibration-data {' '.join(args.calibration_data)} holds no prompts.")
    return texts[: args.calibration_prompts]


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def _load_text(start: float | None, end: float | None) -> str:
    """Other work on the machine shows in the timings: say how busy it was."""
    if start is None or end is None:
        return ""
    return f"; 1-minute load average {start:.1f} before loading, {end:.1f} at the end"


def _software() -> str:
    import torch
    import transformers

    return f"Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}"


def make_methods(args, preset, target, names: list[str], base_cfg, say, calibration: list[str]) -> list[Method]:
    """Decoders for every method; with --tree-budget auto, each draft gets the budget chosen for it."""
    from .decoding.autobudget import DEPTH_STOPS, auto_tree_budget, load_or_measure_curve
    from .decoding.decoder import PlainDecoder, SpeculativeDecoder, encode_prompt
    from .models.loading import load_draft_by_name
    from .models.presets import resolve_draft_name

    from . import bench_report as br

    methods: list[Method] = []
    auto = str(args.tree_budget).lower() == "auto"
    curve = None
    calib_prompts: list[list[int]] = []
    if auto:
        curve = load_or_measure_curve(target, remeasure=args.remeasure, log=say)
        say("verify ms by verified tokens n (forward to the hidden states + LM head and post-processing over n "
            "rows; verification reads the slots with children and a stopping leaf, or every slot, whichever auto finds "
            "cheaper): " + ", ".join(
            f"{n}:{m:.1f}+{curve.post_at(n):.1f}" for n, m in zip(curve.sizes, curve.ms)))
        calib_prompts = [encode_prompt(target.tokenizer, p) for p in calibration]
    for name in names:
        if name == "ar":
            methods.append(Method("ar", "plain (PlainDecoder)", PlainDecoder(target, base_cfg)))
            continue
        if name == "ar-hf":
            methods.append(Method("ar-hf", "plain (transformers generate)", None))
            continue
        if name in br.OTHER_PRECISION_PLAIN:
            methods.append(other_precision_plain(args, preset, name, base_cfg, say))
            continue
        ref = resolve_draft_name(preset, name)
        draft = load_draft_by_name(ref.source, target, depth=base_cfg.depth,
                                   positions_per_specialist=ref.positions_per_specialist)
        label = ref.label or name
        cfg, choice = base_cfg, None
        if auto:
            say(f"calibrating {name} for the tree budget ...")
            choice = auto_tree_budget(target, draft, base_cfg, prompts=calib_prompts, max_budget=args.max_tree_budget,
                                      calibration_tokens=args.calibration_tokens, curve=curve, log=say,
                                      choose_depth=not args.fixed_depth,
                                      depth_stops=DEPTH_STOPS if args.depth_stop is None else (args.depth_stop,))
            cfg = replace(base_cfg, tree_budget=choice.budget, depth=choice.depth or base_cfg.depth,
                          depth_stop=choice.depth_stop, head_rows=args.head_rows or choice.head_rows)
            say(f"{name}: {choice.describe()}")
        methods.append(Method(name, label, SpeculativeDecoder(target, draft, cfg), cfg.tree_budget, choice))
    return methods


def other_precision_plain(args, preset, name: str, base_cfg, say) -> Method:
    """Plain decoding of a second copy of the target in another precision (`ar-float32` beside a bf16 run), so the
    speed-up is also measured against the fastest precision for plain decoding, in the same run."""
    from .decoding.decoder import PlainDecoder
    from .models.loading import load_preset_target, parse_dtype

    dtype = name.removeprefix("ar-")
    say(f"loading a second copy of the target in {dtype} for {name} ...")
    other = load_preset_target(preset.target, quantization=args.quantization, device=args.device,
                               dtype=parse_dtype(dtype))
    return Method(name, f"plain (PlainDecoder, {dtype})", PlainDecoder(other, base_cfg))


def near_tie_tolerance(dtype) -> float:
    """How far apart two logits may be and still swap under rounding between a batched and a one-token forward:
    a few units in the last place of bf16/fp16 at the logits' scale (|logit| ~ 10-30), a hair in fp32."""
    import torch

    return {torch.bfloat16: 0.5, torch.float16: 0.0625}.get(dtype, 0.01)


def _with_max_tokens(method: Method, max_new_tokens: int) -> Method:
    """The same lane with another token budget (decoders are cheap views of the shared target and draft)."""
    if method.decoder is None:
        return method
    dec = copy.copy(method.decoder)
    dec.config = replace(dec.config, max_new_tokens=max_new_tokens)
    return Method(method.name, method.label, dec, method.budget)


def diagnose_mismatch(target, prompt_ids: list[int], want: list[int], index: int, got: int | None = None) -> float:
    """Where a method first diverged, the plain target's logit of its own token minus that of the method's token
    (top-1 minus top-2 when the method's output simply ended there): ~0 means a numerical near-tie, a large margin
    a real bug."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(want[:index])], device=target.device)
    with torch.inference_mode():
        logits = target.model(ids).logits[0, -1].float()
    if got is not None and index < len(want):
        return float(logits[want[index]] - logits[got])
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def _loud(lines: list[str]) -> None:
    bar = "!" * 100
    print("\n" + "\n".join([bar, *[f"!!! {line}" for line in lines], bar]) + "\n", file=sys.stderr, flush=True)


def run_questions(methods: Sequence[Method], target, questions: Sequence[Question], runs: int, base_cfg,
                  progress: bool = True) -> tuple[list, list[str]]:
    """The timed loop: for each run, each question, every method (order rotated per question), every turn with the
    method's own earlier answers in context. Returns the turn records and the turns skipped for lack of context."""
    from tqdm import tqdm

    from . import bench_report as br
    from .decoding.decoder import encode_prompt

    total = runs * sum(len(q.turns) for q in questions) * len(methods)
    bar = tqdm(total=total, unit="decode", desc="bench", disable=not progress, dynamic_ncols=True, file=sys.stderr)
    records: list[br.TurnRecord] = []
    skipped: list[str] = []
    methods = list(methods)
    for run in range(runs):
        for qi, q in enumerate(questions):
            shift = qi % len(methods)
            gc.collect()  # between questions, so a collection does not land inside one method's timing
            for m in methods[shift:] + methods[:shift]:
                cfg = m.decoder.config if m.decoder is not None else base_cfg
                messages: list[dict] = []
                for ti, turn in enumerate(q.turns):
                    messages.append({"role": "user", "content": turn})
                    ids = encode_prompt(target.tokenizer, messages)
                    if len(ids) + cfg.max_new_tokens > target.max_context:
                        skipped.append(f"{q.dataset}/{q.question_id} turn {ti} ({m.name}): {len(ids)} prompt tokens "
                                       f"+ {cfg.max_new_tokens} new exceed the context window {target.max_context}")
                        bar.update(len(q.turns) - ti)
                        break
                    bar.set_postfix_str(f"run {run + 1} {q.dataset}/{q.question_id} {m.name}", refresh=False)
                    tokens, text, stop, wall, events = decode_turn(m, target, ids, cfg)
                    records.append(br.TurnRecord(run=run, method=m.name, dataset=q.dataset,
                                                 question_id=q.question_id, category=q.category, turn=ti,
                                                 token_ids=list(tokens), text=text, stop_reason=stop, wall_time=wall,
                                                 events=events,
                                                 # the reference's prompts let a mismatch be diagnosed later
                                                 prompt_ids=list(ids) if m.name == "ar" else []))
                    messages.append({"role": "assistant", "content": text})
                    bar.update(1)
    bar.close()
    return records, skipped


# ----- the run ---------------------------------------------------------------------------------------------------
def run_benchmark(args, argv: Sequence[str]) -> int:
    import torch

    from . import bench_report as br
    from .decoding.config import DecodeConfig
    from .decoding.decoder import encode_prompt
    from .models.loading import load_preset_target, parse_dtype
    from .models.presets import get_preset

    def say(msg: str) -> None:
        print(f"[bench] {msg}", file=sys.stderr, flush=True)

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.runs < 1:
        raise ConfigError(f"--runs={args.runs} is out of range: use an integer >= 1.")
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit={args.limit} is out of range: use an integer >= 1.")
    preset = get_preset(args.preset)
    budget = args.tree_budget if args.tree_budget is not None else preset.tree_budget
    if str(budget).lower() != "auto":
        try:
            budget = int(budget)
        except ValueError as err:
            raise ConfigError(f"--tree-budget={budget!r}: use an integer >= 2 or 'auto'.") from err
    base_cfg = DecodeConfig(depth=args.depth or preset.depth, top_k=args.top_k or preset.top_k,
                            tree_budget=budget if isinstance(budget, int) else preset.tree_budget,
                            temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                            seed=args.seed, depth_stop=args.depth_stop or 0.0, head_rows=args.head_rows or "read")
    questions = load_questions(args.data, args.limit)
    # Read before the target loads, so bad calibration input fails fast.
    calibration = calibration_texts(args) if str(budget).lower() == "auto" else []
    names = parse_methods(args.methods, hf_generate=not args.no_hf_generate)
    for n in names:
        if not br.is_plain(n) and n not in preset.drafts and not n.startswith("random:"):
            raise ConfigError(f"method {n!r} is not ar, {', '.join(br.OTHER_PRECISION_PLAIN)} or one of preset "
                              f"{preset.name!r}'s drafts ({', '.join(preset.drafts)}).")

    load_start = _load_average()
    if load_start is not None and load_start > 0.5:
        say(f"note: the machine is already busy (1-minute load average {load_start:.1f} on {os.cpu_count()} cores): "
            f"timings will be slow and noisy; with other work running, --threads 1 avoids thread contention.")
    say(f"loading {preset.name} ...")
    target = load_preset_target(preset.target, quantization=args.quantization, device=args.device,
                                dtype=parse_dtype(args.dtype))
    methods = make_methods(args, preset, target, names, base_cfg, say, calibration)

    untrained = [m.name for m in methods if "untrained" in m.label or "random" in m.label]
    notes = []
    if untrained:
        notes.append(f"Untrained (random) drafts: {', '.join(untrained)}. Their acceptance and speed say nothing "
                     f"about POSS; they show what the machinery costs.")

    # Warm-up: every method decodes the first prompt once, untimed.
    warm_ids = encode_prompt(target.tokenizer, questions[0].turns[0])
    warm_tokens = min(args.warmup_tokens, args.max_new_tokens)
    for m in methods:
        warm = _with_max_tokens(m, warm_tokens)
        decode_turn(warm, target, warm_ids, replace(base_cfg, max_new_tokens=warm_tokens))

    records, skipped = run_questions(methods, target, questions, args.runs, base_cfg, progress=not args.no_progress)
    for line in skipped:
        say(f"skipped {line}")

    if args.temperature == 0:
        identity = br.identity_check(records)
        by_key = {(r.method, r.key): r for r in records}
        for mm in br.first_divergences(identity["mismatches"]).values():
            rec = by_key[(identity["reference"], (mm["run"], mm["dataset"], mm["question_id"], mm["turn"]))]
            mm["margin"] = diagnose_mismatch(target, rec.prompt_ids, rec.token_ids, mm["index"], mm["got"])
        identity = br.classify_mismatches(identity, near_tie_tolerance(target.dtype),
                                          str(target.dtype).replace("torch.", ""))
    else:
        identity = {"reference": None, "checked": 0, "mismatches": [], "near_ties": [],
                    "skipped": f"temperature {args.temperature} > 0 (outputs are samples; losslessness is tested "
                               f"statistically in tests/)"}

    settings = (f"depth {base_cfg.depth}, top-k {base_cfg.top_k}, temperature {args.temperature}, top-p {args.top_p}, "
                f"max new tokens {args.max_new_tokens}, runs {args.runs}, seed {args.seed}")
    if base_cfg.depth_stop and str(budget).lower() != "auto":
        settings += f", dynamic depth stop below p {base_cfg.depth_stop:g}"
    if args.head_rows == "all":
        settings += ", the target's LM head over every tree slot"
    if str(budget).lower() == "auto":
        source = (f"first {args.calibration_prompts} prompts of {' '.join(args.calibration_data)}"
                  if args.calibration_data else "the built-in prompts")
        chosen = "; ".join(f"{m.name} → {m.budget_choice.describe()}" for m in methods if m.budget_choice is not None)
        budget_text = f"auto (calibrated on {source}, {args.calibration_tokens} new tokens each): {chosen}"
    else:
        budget_text = f"{budget} (fixed)"
    n_turns = sum(len(q.turns) for q in questions)
    meta = {
        "preset": preset.name, "model_id": preset.name,
        "command": "python -m poss_core.bench " + shlex.join(list(argv)),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hardware": _hardware(target) + _load_text(load_start, _load_average()), "software": _software(),
        "target": f"{preset.description}, {str(target.dtype).replace('torch.', '')} on {target.device.type} "
                  f"(quantization: {target.quantization})",
        "settings": settings, "budget": budget_text,
        "questions": f"{len(questions)} questions, {n_turns} turns from "
                     f"{', '.join(dict.fromkeys(q.dataset for q in questions))}"
                     + (f" (first {args.limit} per dataset)" if args.limit else ""),
        "labels": {m.name: m.label for m in methods},
        "budgets": {m.name: m.budget for m in methods if m.budget is not None},
        "budget_choices": {m.name: m.budget_choice.to_json() for m in methods if m.budget_choice is not None},
        "skipped": skipped, "notes": notes,
    }
    paths = br.write_outputs(Path(args.out), records, meta, base_cfg.depth, identity,
                             plotlyjs=True if args.plotlyjs == "inline" else "cdn")
    agg = json.loads(paths["summary"].read_text())
    _print_console(agg, meta)
    say("wrote " + ", ".join(str(p) for p in paths.values()))
    if identity["mismatches"]:
        _loud([br.identity_banner(identity)] +
              [f"{m['method']} run {m['run']} {m['dataset']}/{m['question_id']} turn {m['turn']}: first difference at "
               f"token {m['index']} (got {m['got']}, plain {m['want']}; plain logit margin "
               f"{m.get('margin', float('nan')):.4g})" for m in identity["mismatches"][:10]])
        return 3
    say(br.identity_banner(identity))
    return 0


def _print_console(agg: dict, meta: dict) -> None:
    """The overall table on stdout: method, τ, tokens/s, speed-up, time split."""
    def f(v, d=2):
        return "–" if v is None else f"{v:.{d}f}"

    print(f"\n{meta['preset']} | {meta['settings']} | tree budget {meta['budget']}")
    print(f"{'method':<10} {'tau':>6} {'tau/set':>8} {'tok/s':>16} {'speed-up':>16} {'draft ms':>9} "
          f"{'verify ms':>10} {'overhead ms':>12}")
    for m in agg["methods"]:
        c = agg["table"][m]["overall"]
        tps = f"{f(c['tokens_per_s'], 1)} ± {f(c['tokens_per_s_std'], 1)}"
        sp = f"{f(c['speedup'])} ± {f(c['speedup_std'])}"
        print(f"{m:<10} {f(c['tau_pooled']):>6} {f(agg['mean_tau_over_datasets'][m]):>8} {tps:>16} {sp:>16} "
              f"{f(c['draft_ms']):>9} {f(c['verify_ms']):>10} {f(c['overhead_ms']):>12}")
    print("tau = pooled over every round; tau/set = the mean of the datasets' tau (the paper's mean column)")
    print()


# ----- engine overhead -------------------------------------------------------------------------------------------
def measure_overhead(target, draft, cfg, prompt: str = "Tell me a story about a lighthouse keeper.",
                     rounds: int = 60, warmup_rounds: int = 5) -> dict[str, float]:
    """Per draft round: wall, draft and verify ms as events report them, and the engine's own overhead = wall minus
    the time spent inside model forwards (the target's forward and LM head, the draft's specialist layers and its
    LM head), measured by timing those calls. Nodes per tree are reported to show the tree was full.

    The target's LM head is also timed both ways on the same rounds: over the rows verification reads (what the
    engine does) and, as an extra call outside the round's accounting, over every slot of the tree (what it did
    before `verify.SlotRows`): an A/B in one run, so the machine's speed cancels out."""
    import statistics

    from .decoding.decoder import SpeculativeDecoder, encode_prompt
    from .decoding.events import DecodeSummary

    clock = {"model": 0.0, "extra": 0.0, "head": 0.0, "head_rows": 0, "all_head": 0.0, "all_rows": 0}

    def timed(fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                clock["model"] += time.perf_counter() - t0
        return wrapper

    forward, logits = timed(type(target).forward.__get__(target)), timed(type(target).logits.__get__(target))

    def timed_head(hidden):
        before = clock["model"]
        out = logits(hidden)
        clock["head"] += clock["model"] - before
        clock["head_rows"] += int(hidden.shape[0])
        return out

    def forward_and_full_head(*a, **k):
        out = forward(*a, **k)
        if k.get("logits") == "none" and out.hidden.shape[0] > 1:  # a verify pass: the old LM head, for comparison
            t0 = time.perf_counter()
            type(target).logits(target, out.hidden)
            clock["all_head"] += time.perf_counter() - t0
            clock["extra"] += time.perf_counter() - t0
            clock["all_rows"] += int(out.hidden.shape[0])
        return out

    # Instance attributes shadow the methods for these two objects only; the engine's code is unchanged.
    target.forward = forward_and_full_head
    target.logits = timed_head
    draft.run_specialist = timed(type(draft).run_specialist.__get__(draft))
    draft.head_logits = timed(type(draft).head_logits.__get__(draft))
    try:
        dec = SpeculativeDecoder(target, draft, replace(cfg, max_new_tokens=10 ** 6))
        ids = encode_prompt(target.tokenizer, prompt)
        rows = []
        gen = dec.generate(ids)
        last = dict(clock)
        for item in gen:
            if isinstance(item, DecodeSummary):
                break
            delta = {key: clock[key] - last[key] for key in clock}
            last = dict(clock)
            if item.prefill:
                continue
            # The comparison's extra LM-head call ran inside this round's verify timing: take it out again.
            extra_ms = delta["extra"] * 1000.0
            rows.append((item.wall_ms - extra_ms, item.draft_ms, item.verify_ms - extra_ms, delta["model"] * 1000.0,
                         len(item.nodes), item.accept_len, delta["head"] * 1000.0, delta["head_rows"],
                         delta["all_head"] * 1000.0, delta["all_rows"]))
            if len(rows) >= rounds + warmup_rounds:
                gen.close()
                break
    finally:
        for obj, name in ((target, "forward"), (target, "logits"), (draft, "run_specialist"), (draft, "head_logits")):
            obj.__dict__.pop(name, None)
    rows = rows[warmup_rounds:]
    if not rows:
        raise PossError("the decode ended before any round could be measured: raise --max-context or lower --rounds")
    col = list(zip(*rows))
    engine = [w - m for w, m in zip(col[0], col[3])]
    return {
        "rounds": len(rows), "wall_ms": statistics.fmean(col[0]), "draft_ms": statistics.fmean(col[1]),
        "verify_ms": statistics.fmean(col[2]), "event_overhead_ms": statistics.fmean(
            [w - d - v for w, d, v in zip(col[0], col[1], col[2])]),
        "model_ms": statistics.fmean(col[3]), "engine_ms": statistics.fmean(engine),
        "engine_ms_median": statistics.median(engine), "engine_share": statistics.fmean(engine) / statistics.fmean(col[0]),
        "nodes": statistics.fmean(col[4]), "tau": statistics.fmean(a + 1 for a in col[5]),
        "head_ms": statistics.fmean(col[6]), "head_rows": statistics.fmean(col[7]),
        "all_head_ms": statistics.fmean(col[8]), "all_rows": statistics.fmean(col[9]),
    }


def overhead_main(argv: Sequence[str]) -> int:
    import torch

    from .decoding.config import DecodeConfig
    from .models.loading import add_dtype_argument, load_draft_by_name, load_preset_target, parse_dtype
    from .models.presets import get_preset, resolve_draft_name

    p = argparse.ArgumentParser(prog="python -m poss_core.bench overhead",
                                description="The engine's own per-round cost (everything but model forwards).")
    p.add_argument("--preset", default="tiny-random")
    p.add_argument("--draft", default="poss2")
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--tree-budget", type=int, default=60)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default=None)
    add_dtype_argument(p)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    preset = get_preset(args.preset)
    target = load_preset_target(preset.target, quantization="none", device=args.device, dtype=parse_dtype(args.dtype))
    if preset.name == "tiny-random":
        # A tiny target with room for a long decode: the default tiny one has 512 positions.
        from .models.tiny import tiny_target

        target = tiny_target(seed=0, max_positions=8192)
    ref = resolve_draft_name(preset, args.draft)
    draft = load_draft_by_name(ref.source, target, depth=args.depth,
                               positions_per_specialist=ref.positions_per_specialist)
    cfg = DecodeConfig(depth=args.depth, top_k=args.top_k, tree_budget=args.tree_budget)
    r = measure_overhead(target, draft, cfg, rounds=args.rounds)
    print(f"{preset.name} target, draft {args.draft}, depth {args.depth}, top-k {args.top_k}, tree budget "
          f"{args.tree_budget} ({r['nodes']:.0f} drafted nodes per round), {r['rounds']} rounds, "
          f"{torch.get_num_threads()} threads")
    print(f"  round {r['wall_ms']:.2f} ms = draft {r['draft_ms']:.2f} + verify {r['verify_ms']:.2f} + rest "
          f"{r['event_overhead_ms']:.2f} (as events report them)")
    print(f"  model forwards {r['model_ms']:.2f} ms; engine overhead (everything else) {r['engine_ms']:.2f} ms "
          f"mean, {r['engine_ms_median']:.2f} ms median, {r['engine_share'] * 100:.0f}% of the round")
    saved = r["all_head_ms"] - r["head_ms"]
    print(f"  target LM head per round: {r['head_ms']:.2f} ms over the {r['head_rows']:.1f} rows verification reads; "
          f"{r['all_head_ms']:.2f} ms over all {r['all_rows']:.1f} slots (timed on the same rounds): "
          f"{saved:.2f} ms saved, {100 * saved / (r['wall_ms'] + saved):.1f}% of a round that heads every slot")
    return 0


def report_main(argv: Sequence[str]) -> int:
    from . import bench_report as br

    p = argparse.ArgumentParser(prog="python -m poss_core.bench report",
                                description="Rebuild tables, JSONL and HTML from a results folder's records.jsonl.")
    p.add_argument("folder")
    p.add_argument("--plotlyjs", choices=["inline", "cdn"], default="inline")
    p.add_argument("--limit", type=int, default=None,
                   help="only the first N questions of each dataset (a larger run read as a smaller one); needs --out")
    p.add_argument("--out", default=None, help="write the rebuilt report here instead of into FOLDER")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    if args.limit is not None and (args.out is None or Path(args.out).resolve() == folder.resolve()):
        raise PossError("--limit rebuilds a smaller report: give --out with another folder, so the full records stay.")
    summary = json.loads((folder / "summary.json").read_text())
    records = br.read_records(folder / "records.jsonl")
    meta, identity = summary["meta"], summary.get("identity")
    if args.limit is not None:
        records = br.first_questions(records, args.limit)
        meta = {**meta, "notes": list(meta.get("notes", [])) + [
            f"Rebuilt from {folder}'s records: the first {args.limit} questions of each dataset "
            f"(python -m poss_core.bench report {folder} --limit {args.limit} --out {args.out})."]}
        identity = br.subset_identity(identity, records) if identity is not None else None
    out = Path(args.out) if args.out else folder
    out.mkdir(parents=True, exist_ok=True)
    paths = br.write_outputs(out, records, meta, int(summary["depth"]), identity,
                             plotlyjs=True if args.plotlyjs == "inline" else "cdn")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)

    def body() -> int:
        if argv and argv[0] == "overhead":
            return overhead_main(argv[1:])
        if argv and argv[0] == "report":
            return report_main(argv[1:])
        return run_benchmark(build_parser().parse_args(argv), argv)

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
