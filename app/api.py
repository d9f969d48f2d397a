"""The /compare API endpoint: one comparison without streaming, each lane's text and summary as JSON."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable

import gradio as gr

from poss_core import compare, metrics
from poss_core.errors import PossError
from poss_core.json_safe import clean_json
from poss_core.methods import PLAIN
from poss_core.models.presets import DEFAULT_PRESET, get_preset

from . import state
from .state import RunSettings, ui_defaults


def compare_api(prompt: str, methods: list[str], preset: str = DEFAULT_PRESET, max_new_tokens: int = 64,
                temperature: float = 0.0, top_p: float = 1.0, depth: int = 0, top_k: int = 0, tree_budget: int = 0,
                seed: int = 0, precision: str = "auto", cancel: threading.Event | None = None) -> dict:
    """Run one comparison (no streaming) and return each lane's text and summary.

    methods: two or three of plain, eagle, poss1, poss2, poss3, matched (the preset's drafts).
    preset: a preset's name (empty: the one the app serves). depth, top_k: 0 for the UI's defaults. tree_budget: 0 fits each draft's
    budget to this machine (auto, as the UI does by default; the first call per draft calibrates it).
    precision: auto (fp32 on a CPU, bf16 on a GPU), float32 or bfloat16, the target's dtype.
    Returns {"preset", "settings", "lanes": [{"method", "label", "text", "stop_reason", "tree_budget", "identical_to_plain",
    "speedup_vs_plain", "summary": {tau, pos_acc, pos_rate, accept_hist, tokens_per_s, new_tokens, rounds, ...}}],
    "timing", "timed_out"}. Lanes run in turns, one round each; tokens/s counts each lane's own compute. Every setting
    has the app's bounds (decoding.config.LIMITS); a call that runs past the server's per-call limit is stopped and
    says so ("timed_out": true, every lane's stop_reason "cancelled"). Setting `cancel` stops the lanes before their
    next round (a cancelled API call)."""
    name = preset or DEFAULT_PRESET
    try:
        d = ui_defaults(get_preset(name))
        settings = RunSettings(prompt, False, name, methods, temperature, top_p, depth or d["depth"],
                               top_k or d["top_k"], tree_budget or d["tree_budget"], max_new_tokens, seed, "auto",
                               auto_budget=not tree_budget, precision=precision)
        spec = settings.spec([])
        spec.check()
        if cancel is not None and cancel.is_set():
            raise gr.Error("cancelled before the comparison started.")
        comp = compare.run_to_end(compare.start(spec, cancel=cancel, wait_for_fits=False), time_limit_s=state.CALL_LIMIT_S)
    except PossError as err:
        raise gr.Error(str(err)) from err
    plain = comp.lane(PLAIN)
    out_lanes = []
    for lane in comp.lanes:
        summary = lane.summary or {}
        stats = metrics.summarize(lane.events)
        tps = stats["tokens_per_s"]
        out_lanes.append({
            "method": lane.method, "label": lane.label, "text": lane.text, "error": lane.error,
            "stop_reason": summary.get("stop_reason"), "tree_budget": lane.budget, "budget_auto": lane.budget_auto,
            "identical_to_plain": (lane.token_ids == plain.token_ids) if plain is not None and not lane.plain
            else None,
            "speedup_vs_plain": metrics.speedup(tps, metrics.tokens_per_s(plain.events))
            if plain is not None and not lane.plain else None,
            "summary": stats})
    return clean_json({"preset": name, "settings": comp.spec.to_json(), "lanes": out_lanes, "hardware": comp.hardware,
                       "timing": "lanes run in turns, one round each; tokens/s counts each lane's own compute",
                       "timed_out": comp.timed_out,
                       **({"note": f"stopped at the server's limit of {state.CALL_LIMIT_S:g} s per call"}
                          if comp.timed_out else {})})


def compare_endpoint(app_preset: str, wrap: Callable = lambda fn: fn):
    """`compare_api` as the app serving `app_preset` offers it: an empty preset means that one.

    The endpoint is a coroutine that runs the comparison in a worker thread: when the client cancels the call (or
    goes away) Gradio cancels the coroutine, which sets the comparison's cancel flag, so its lanes stop before their
    next round instead of running on to max_new_tokens. `wrap` decorates the worker (ZeroGPU's decorator on a Space)."""
    work = wrap(compare_api)

    async def compare(prompt: str, methods: list[str], preset: str = "", max_new_tokens: int = 64,
                      temperature: float = 0.0, top_p: float = 1.0, depth: int = 0, top_k: int = 0,
                      tree_budget: int = 0, seed: int = 0, precision: str = "auto") -> dict:
        cancel = threading.Event()
        call = functools.partial(work, prompt, methods, preset or app_preset, max_new_tokens, temperature, top_p,
                                 depth, top_k, tree_budget, seed, precision, cancel=cancel)
        try:
            return await asyncio.get_running_loop().run_in_executor(None, call)
        except asyncio.CancelledError:
            cancel.set()
            raise

    compare.__doc__ = compare_api.__doc__
    return compare
