"""`--tree-budget auto` end to end: a short calibration decode on prompts that are never the evaluation sets, the
forward-time curve, and the choice of the budget with the highest expected tokens per second; cached per draft."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from ..base.errors import CallStopped
from ..decoding.config import DecodeConfig
from ..decoding.decoder import SpeculativeDecoder, encode_prompt
from ..models.target import TargetModel
from ..rounds import metrics
from ..rounds.events import DecodeSummary, RoundEvent
from . import cache
from .cost_model import (
    DEPTH_STOPS,
    MAX_BUDGET,
    BudgetChoice,
    choose_budget,
    default_profile,
    draft_ms_by_depth,
    max_useful_budget,
    profile_from_events,
)
from .timing import ForwardCurve

# Written for calibration (chat, code, arithmetic, a fact, a summary, an instruction); never the evaluation sets.
CALIBRATION_PROMPTS = (
    "Explain why the sky is blue in a short paragraph.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "A baker makes 24 rolls in the morning and twice as many in the afternoon. How many rolls does he make a day?",
    "Who wrote the novel Pride and Prejudice, and when was it published?",
    "Summarize in two sentences: The town council voted on Tuesday to build a new library next to the park. "
    "Construction starts in spring and should take eighteen months.",
    "Give three tips for staying focused while studying.",
)


def calibrate(
    target: TargetModel,
    draft,
    config: DecodeConfig,
    prompts: Sequence[Sequence[int]],
    max_budget: int = MAX_BUDGET,
    max_new_tokens: int = 48,
    cancel=None,
) -> tuple[list[RoundEvent], int]:
    """Decode the prompts at the largest budget considered; return every event and that budget. Setting `cancel`
    (an Event, e.g. a call's cap) stops the decode within one round with CallStopped."""
    budget = max(2, min(max_budget, max_useful_budget(config.depth, config.top_k)))
    # Every round drafts the full depth: what a dynamic depth stop would have cut is read off these rounds.
    cfg = config.changed(tree_budget=budget, max_new_tokens=max_new_tokens, depth_stop=0.0, head_rows="read")
    decoder = SpeculativeDecoder(target, draft, cfg)
    events: list[RoundEvent] = []
    for ids in prompts:
        for item in decoder.generate(list(ids), cancel=cancel):
            if not isinstance(item, DecodeSummary):
                events.append(item)
        if cancel is not None and cancel.is_set():  # a cut-short decode would skew the fit: nothing is kept
            raise CallStopped("fitting the tree budget")
    return events, budget


def auto_tree_budget(
    target: TargetModel,
    draft,
    config: DecodeConfig,
    prompts: Sequence[Sequence[int]] | None = None,
    profile: str = "calibrate",
    max_budget: int = MAX_BUDGET,
    calibration_tokens: int = 48,
    curve: ForwardCurve | None = None,
    remeasure: bool = False,
    log=None,
    choose_depth: bool = True,
    depth_stops: Sequence[float] = DEPTH_STOPS,
    cancel=None,
) -> BudgetChoice:
    """Pick the tree budget (and, with `choose_depth`, a depth up to the configured one; and a dynamic depth stop
    among `depth_stops`) for this target, draft and hardware (see the module docstring).

    `prompts` are token-id lists for the calibration decode (default: built-in prompts, never the evaluation sets);
    `profile="default"` keeps the calibration's timings but takes τ(B) from the default profile. `cancel` (an Event)
    stops the curve's measurement and the calibration decode with CallStopped."""
    if profile not in ("calibrate", "default"):
        raise ValueError(f"profile={profile!r}: use 'calibrate' or 'default'")
    curve = curve or cache.load_or_measure_curve(target, remeasure=remeasure, log=log, cancel=cancel)
    if prompts is None:
        prompts = [encode_prompt(target.tokenizer, p) for p in CALIBRATION_PROMPTS]
    events, budget = calibrate(target, draft, config, prompts, max_budget, calibration_tokens, cancel=cancel)
    split = metrics.time_split(events)
    draft_ms: float | dict[int, float] = split["draft_ms"] if not math.isnan(split["draft_ms"]) else 0.0
    by_depth = draft_ms_by_depth(events)
    if by_depth:
        draft_ms = by_depth
    overhead_ms = split["overhead_ms"] if not math.isnan(split["overhead_ms"]) else 0.0
    prof = (
        profile_from_events(events, budget, config.depth, len(prompts))
        if profile == "calibrate"
        else default_profile(config.depth, budget)
    )
    # The measured overhead is the engine's own (argmax over a few rows, the cache commit, events): the LM head, a
    # leaf's second call included, counts as verify time, which `head_ms` costs per tree from the curve instead.
    fixed_ms = overhead_ms
    choice = choose_budget(
        curve,
        prof,
        draft_ms,
        fixed_ms,
        depth=config.depth,
        top_k=config.top_k,
        choose_depth=choose_depth,
        depth_stops=depth_stops,
    )
    choice.curve_measured = curve.measured
    return choice


def cached_budget_choice(
    target: TargetModel,
    draft,
    config: DecodeConfig,
    path: Path | None = None,
    calibration_prompts: int = 3,
    calibration_tokens: int = 32,
    log=None,
    **auto_kwargs,
) -> BudgetChoice:
    """The tree budget for this hardware, target, draft, depth and top_k, at the configured depth (the app keeps the
    depth the user chose: the tree and the per-position charts are what it shows). Calibrated once (a few seconds
    to a minute on a CPU) and cached as JSON beside the forward-time curve."""
    known = cache.known_budget_choice(target, draft, config, path, curve=auto_kwargs.get("curve"))
    if known is not None:
        return known
    path = Path(path) if path is not None else cache.choice_cache_path()
    prompts = [encode_prompt(target.tokenizer, p) for p in CALIBRATION_PROMPTS[:calibration_prompts]]
    (log or cache.say)(f"fitting the tree budget of {draft.spec.label} to this machine (once) ...")
    choice = auto_tree_budget(
        target,
        draft,
        config,
        prompts=prompts,
        calibration_tokens=calibration_tokens,
        log=log,
        choose_depth=False,
        **auto_kwargs,
    )
    cache.write_store(path, cache.cached_choice_key(target, draft, config), choice.to_json())
    return choice
