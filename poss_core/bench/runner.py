"""The benchmark's timed runs: the questions, one lane per method (its decoder, with `--tree-budget auto` its fitted
budget), and the loop that decodes every turn of every question with every method, run after run.

What the loop tells while it runs: with a terminal, a progress bar; without one (a log, CI, `2>&1 | tee`), one line
per finished decode on stderr (method, question, tokens, seconds), since a bar redrawn with carriage returns shows
nothing in a log until the run ends. Every decode runs under the stall watch (`stall.py`), and a decode that fails
becomes a LaneError naming the method and the question."""

from __future__ import annotations

import argparse
import copy
import gc
import glob
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..autobudget import CALIBRATION_PROMPTS, DEPTH_STOPS, auto_tree_budget, load_or_measure_curve
from ..base.errors import ConfigError, PossError, PromptError
from ..base.prompt_files import read_prompts
from ..decoding.config import check_messages, check_prompt_tokens
from ..decoding.decoder import encode_prompt
from ..models.loading import load_preset_target, parse_dtype
from ..results.records import TurnRecord
from ..rounds.events import DecodeSummary
from ..runtime import methods
from ..views.pooling import light_event
from .stall import StallWatch, lane_failed


@dataclass
class Question:
    dataset: str
    question_id: Any
    category: str
    turns: list[str]


@dataclass
class BenchLane:
    """One method as the benchmark runs it: its registry name and label, its decoder (transformers' `generate` for
    plain-hf, pld and assisted), and the budget `auto` chose for it."""

    name: str
    label: str
    decoder: Any
    budget: int | None = None
    budget_choice: Any = None
    trained: bool = True
    notes: list[str] = field(default_factory=list)


def data_files(patterns: Sequence[str]) -> list[str]:
    """The files --data names (globs expanded, each once, in order)."""
    paths: list[str] = []
    for p in patterns:
        found = sorted(glob.glob(p)) or ([p] if Path(p).is_file() else [])
        if not found:
            raise ConfigError(
                f"--data {p!r} matches no file: give eval JSONL files (e.g. ../shared/data/eval/*.jsonl)."
            )
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
    """The method names of --methods, plain decoding always first: speed-ups and the identity check need it."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    names = [n for n in names if n not in (methods.PLAIN, methods.PLAIN_HF)]
    plain = [methods.PLAIN, methods.PLAIN_HF] if hf_generate else [methods.PLAIN]
    return plain + list(dict.fromkeys(names))


def calibration_texts(args: argparse.Namespace) -> list[str]:
    """The prompts `auto` calibrates on: the first --calibration-prompts of --calibration-data, else the built-in
    ones. Never the evaluation sets: a budget fitted on what is measured would flatter the speed-up."""
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


def decode_turn(
    method: BenchLane, ids: list[int], beat: Callable[[], None] | None = None
) -> tuple[list[int], str, str, float, list]:
    """Run one decode; return (token ids, text, stop reason, wall seconds, light events). The wall time is taken
    around the whole call; what the rounds' own wall_ms do not cover (set-up, the closing summary) is booked as
    overhead of the last round, so tokens/s from events equals new tokens over this wall time (for transformers'
    generate too: its decoder's events are its streamer's rounds). `beat` is called at every round (and, for
    transformers' generate, at every target forward): the stall watch's progress."""
    events, originals, summary = [], [], None
    decoder = method.decoder
    if beat is not None and hasattr(decoder, "progress"):
        decoder.progress = beat  # generate runs whole before its rounds are read: its streamer beats instead
    if hasattr(decoder, "prepare"):  # the oracle's plain run of this prompt: known before the clock starts
        decoder.prepare(ids)
    t0 = time.perf_counter()
    for item in decoder.generate(ids):
        if beat is not None:
            beat()
        if isinstance(item, DecodeSummary):
            summary = item
        else:
            originals.append(item)
            events.append(light_event(item))
    for light, event in zip(events, originals):  # filled in by the decoder when the decode ended, after the copy
        light.continuation_deviation = event.continuation_deviation
        light.every_position_deviation = event.every_position_deviation
    # The oracle re-deriving its continuation after a rounding near-tie is not decoding work.
    wall = time.perf_counter() - t0 - getattr(decoder, "untimed_s", 0.0)
    tokens, text, stop = summary.token_ids, summary.text, summary.stop_reason
    if events:
        rest = wall * 1000.0 - sum(e.wall_ms for e in events)
        if rest > 0:
            events[-1].wall_ms += rest
    return tokens, text, stop, wall, events


def watched_decode(
    watch: StallWatch | None, lane: BenchLane, ids: list[int], where: str
) -> tuple[list[int], str, str, float, list]:
    """`decode_turn` under the stall watch: a stall is a StallError, any other failure a LaneError, each naming the
    method and `where` (the question, turn and run, or the warm-up)."""
    name = f"{lane.name} ({lane.label})" if lane.label and lane.label != lane.name else lane.name
    if watch is None:
        watch = StallWatch(None)
    try:
        with watch.watching(f"{name}, decoding {where},"):
            return decode_turn(lane, ids, watch.beat)
    except PossError:
        raise
    except Exception as err:  # a device error, a bug, an error inside transformers' generate
        raise lane_failed(name, where, err) from err


def progress_line(done: int, total: int, where: str, lane: str, tokens: int, seconds: float) -> str:
    """One finished decode, for a log: [bench] 5/96 run 1 alpaca/3 turn 0 plain-hf: 128 tokens in 2.41 s (53.1/s)."""
    rate = f" ({tokens / seconds:.1f} tokens/s)" if seconds > 0 else ""
    return f"[bench] {done}/{total} {where} {lane}: {tokens} tokens in {seconds:.2f} s{rate}"


def make_lanes(args, preset, target, names: list[str], base_cfg, say, calibration: list[str]) -> list[BenchLane]:
    """A lane for every method; with --tree-budget auto, each draft gets the budget chosen for it."""
    auto = str(args.tree_budget).lower() == "auto"
    curve, calib_prompts = None, []
    if auto:
        curve = load_or_measure_curve(target, remeasure=args.remeasure, log=say)
        say(
            "verify ms by verified tokens n (forward to the hidden states + LM head over n "
            "rows; verification reads the slots with children and a stopping leaf, or every slot, whichever auto finds "
            "cheaper): " + ", ".join(f"{n}:{m:.1f}+{curve.post_at(n):.1f}" for n, m in zip(curve.sizes, curve.ms))
        )
        calib_prompts = [encode_prompt(target.tokenizer, p) for p in calibration]
    lanes: list[BenchLane] = []
    for name in names:
        method = methods.get_method(preset, name)
        if method.hf_mode:  # transformers' generate: plain-hf, pld, assisted (its smaller model loaded once here)
            assistant = methods.load_assistant(method, target, args.quantization) if method.assistant else None
            decoder = methods.build_decoder(method, target, base_cfg, assistant=assistant)
            decoder.in_caller_thread = True  # timed as it runs for a user: in the thread that calls it
            lanes.append(BenchLane(method.name, method.label, decoder))
        elif method.name in methods.OTHER_PRECISION_PLAIN:
            lanes.append(other_precision_plain(args, preset, method, base_cfg, say))
        elif method.plain:
            lanes.append(BenchLane(method.name, method.label, methods.build_decoder(method, target, base_cfg)))
        elif method.oracle:
            cfg = methods.oracle_config(base_cfg) if auto else base_cfg
            if auto:
                say(
                    f"{name}: the bare chain, budget {cfg.tree_budget} (depth {cfg.depth} + the root): filler nodes "
                    f"are never accepted, so no larger budget can be faster"
                )
            lanes.append(BenchLane(name, method.label, methods.build_decoder(method, target, cfg), cfg.tree_budget))
        else:
            draft = methods.load_draft(method, target, base_cfg.depth)
            cfg, choice = base_cfg, None
            if auto:
                say(f"calibrating {name} for the tree budget ...")
                choice = auto_tree_budget(
                    target,
                    draft,
                    base_cfg,
                    prompts=calib_prompts,
                    max_budget=args.max_tree_budget,
                    calibration_tokens=args.calibration_tokens,
                    curve=curve,
                    log=say,
                    choose_depth=not args.fixed_depth,
                    depth_stops=DEPTH_STOPS if args.depth_stop is None else (args.depth_stop,),
                )
                cfg = methods.with_budget_choice(base_cfg, choice)
                if args.head_rows:
                    cfg = cfg.changed(head_rows=args.head_rows)
                say(f"{name}: {choice.describe()}")
            lanes.append(
                BenchLane(
                    name,
                    method.label,
                    methods.build_decoder(method, target, cfg, draft),
                    cfg.tree_budget,
                    choice,
                    method.trained,
                )
            )
    return lanes


def other_precision_plain(args, preset, method: methods.Method, base_cfg, say) -> BenchLane:
    """Plain decoding of a second copy of the target in another precision (`plain-float32` beside a bf16 run), so the
    speed-up is also measured against the fastest precision for plain decoding, in the same run."""
    dtype = method.name.removeprefix("plain-")
    say(f"loading a second copy of the target in {dtype} for {method.name} ...")
    other = load_preset_target(
        preset.target, quantization=args.quantization, device=args.device, dtype=parse_dtype(dtype)
    )
    plain = methods.PLAIN_METHODS[methods.PLAIN]
    return BenchLane(method.name, method.label, methods.build_decoder(plain, other, base_cfg))


def with_max_tokens(lane: BenchLane, max_new_tokens: int) -> BenchLane:
    """The same lane with another token budget (decoders are cheap views of the shared target and draft)."""
    dec = copy.copy(lane.decoder)
    dec.config = dec.config.changed(max_new_tokens=max_new_tokens)
    return BenchLane(lane.name, lane.label, dec, lane.budget)


def turn_prompt(target, messages: list[dict], max_new_tokens: int) -> tuple[list[int] | None, str]:
    """A turn's prompt ids, or None and why the benchmark skips the turn: the prompt cap every caller applies
    (`LIMITS`' MAX_PROMPT_CHARS before tokenizing, so a huge question costs nothing, and MAX_PROMPT_TOKENS after) and
    room in the context window for the new tokens."""
    try:
        ids = encode_prompt(target.tokenizer, check_messages(messages))
        check_prompt_tokens(len(ids))
    except PromptError as err:
        return None, str(err)
    if len(ids) + max_new_tokens > target.max_context:
        return None, (f"{len(ids)} prompt tokens + {max_new_tokens} new exceed the context window {target.max_context}")
    return ids, ""


def warm_up_prompt(target, questions: Sequence[Question], max_new_tokens: int) -> list[int]:
    """The first question's opening turn that the benchmark would run (one it skips cannot warm it up)."""
    why = ""
    for q in questions:
        ids, why = turn_prompt(target, [{"role": "user", "content": q.turns[0]}], max_new_tokens)
        if ids is not None:
            return ids
    raise ConfigError(
        f"no question of --data fits the prompt cap and the context window (the last: {why}): give shorter questions."
    )


def progress_mode(progress: bool | str, stream=None) -> str:
    """ "bar" with a terminal, "lines" without one (a log), "none" when asked for no progress at all."""
    if progress is False or progress == "none":
        return "none"
    if progress in ("bar", "lines"):
        return progress
    stream = sys.stderr if stream is None else stream
    return "bar" if getattr(stream, "isatty", lambda: False)() else "lines"


def run_questions(
    lanes: Sequence[BenchLane],
    target,
    questions: Sequence[Question],
    runs: int,
    progress: bool | str = True,
    watch: StallWatch | None = None,
) -> tuple[list, list[str]]:
    """The timed loop: for each run, each question, every method (order rotated per question), every turn with the
    method's own earlier answers in context. Returns the turn records and the turns skipped for lack of context.
    `progress`: True (a bar with a terminal, else a line per decode), "bar", "lines", or False; `watch`: the stall
    watch every decode runs under."""
    mode = progress_mode(progress)
    total = runs * sum(len(q.turns) for q in questions) * len(lanes)
    bar = tqdm(total=total, unit="decode", desc="bench", disable=mode != "bar", dynamic_ncols=True, file=sys.stderr)
    records: list[TurnRecord] = []
    skipped: list[str] = []
    lanes = list(lanes)
    done = 0
    for run in range(runs):
        for qi, q in enumerate(questions):
            shift = qi % len(lanes)
            gc.collect()  # between questions, so a collection does not land inside one method's timing
            for lane in lanes[shift:] + lanes[:shift]:
                cfg = lane.decoder.config
                messages: list[dict] = []
                for ti, turn in enumerate(q.turns):
                    messages.append({"role": "user", "content": turn})
                    ids, why = turn_prompt(target, messages, cfg.max_new_tokens)
                    if ids is None:
                        skipped.append(f"{q.dataset}/{q.question_id} turn {ti} ({lane.name}): {why}")
                        bar.update(len(q.turns) - ti)
                        done += len(q.turns) - ti
                        break
                    where = f"run {run + 1} {q.dataset}/{q.question_id} turn {ti}"
                    bar.set_postfix_str(f"run {run + 1} {q.dataset}/{q.question_id} {lane.name}", refresh=False)
                    tokens, text, stop, wall, events = watched_decode(watch, lane, ids, where)
                    records.append(
                        TurnRecord(
                            run=run,
                            method=lane.name,
                            dataset=q.dataset,
                            question_id=q.question_id,
                            category=q.category,
                            turn=ti,
                            token_ids=list(tokens),
                            text=text,
                            stop_reason=stop,
                            wall_time=wall,
                            events=events,
                            # the reference's prompts let a mismatch be diagnosed later
                            prompt_ids=list(ids) if lane.name == methods.PLAIN else [],
                        )
                    )
                    messages.append({"role": "assistant", "content": text})
                    bar.update(1)
                    done += 1
                    if mode == "lines":
                        line = progress_line(done, total, where, lane.name, len(tokens), wall)
                        print(line, file=sys.stderr, flush=True)
    bar.close()
    return records, skipped
