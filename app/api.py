"""The /compare API endpoint: one comparison without streaming, each lane's text and summary as JSON."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable

import gradio as gr

from poss_core import compare, metrics
from poss_core.errors import PossError
from poss_core.json_safe import clean_json
from poss_core.methods import PLAIN
from poss_core.models.presets import DEFAULT_PRESET, get_preset

from . import share, state
from .class_pool import CLASS
from .state import RunSettings, ui_defaults

PROGRESS_EVERY_S = 1.0  # how often /compare yields while it works: the points where a gone client is noticed
QUEUE_POLL_S = 0.1  # how often a waiting /compare call checks for its live slot


def compare_api(prompt: str, methods: list[str], preset: str = DEFAULT_PRESET, max_new_tokens: int = 64,
                temperature: float = 0.0, top_p: float = 1.0, depth: int = 0, top_k: int = 0, tree_budget: int = 0,
                seed: int = 0, precision: str = "auto", cancel: threading.Event | None = None,
                quiet_refusals: bool = False) -> dict:
    """Run one comparison (no streaming) and return each lane's text and summary.

    methods: two or three of plain, eagle, poss1, poss2, poss3, matched (the preset's drafts).
    preset: a preset's name (empty: the one the app serves). depth, top_k: 0 for the UI's defaults. tree_budget: 0
    fits each draft's budget to this machine (the UI's "Fastest tree for this machine"; the first call per draft and
    setting calibrates it within the call's time limit, or, on a server started with --no-call-fits, uses the default
    budget where no fit is cached: the lane's "budget_note" says so).
    precision: auto (fp32 on a CPU, bf16 on a GPU), float32 or bfloat16, the target's dtype.
    Returns {"preset", "settings", "lanes": [{"method", "label", "text", "stop_reason", "tree_budget", "identical_to_plain",
    "speedup_vs_plain", "summary": {tau, pos_acc, pos_rate, accept_hist, tokens_per_s, new_tokens, rounds, ...}}],
    "timing", "timed_out"}. Lanes run in turns, one round each; tokens/s counts each lane's own compute. Every setting
    has the app's bounds (decoding.config.LIMITS); a call that runs past the server's per-call limit is stopped and
    says so ("timed_out": true, every lane's stop_reason "cancelled"); the limit's clock starts with the call, so
    loading, fitting and the oracle's reference decode count (a call whose limit runs out before its lanes start is
    refused with a message that says so). Setting `cancel` stops all of it within one round (a
    cancelled API call, or a client gone away). A refused input raises gr.Error (with `quiet_refusals`, without a
    traceback in the server's log)."""
    name = preset or DEFAULT_PRESET
    budget = compare.CallBudget(state.CALL_LIMIT_S, parent=cancel)
    spec = api_spec(prompt, methods, name, max_new_tokens, temperature, top_p, depth, top_k, tree_budget, seed,
                    precision, quiet_refusals)
    try:
        if budget.is_set() and not budget.timed_out:
            raise gr.Error("cancelled before the comparison started.", print_exception=not quiet_refusals)
        comp = compare.run_to_end(compare.start(spec, cancel=budget, wait_for_fits=False, new_fits=state.CALL_FITS))
    except PossError as err:
        raise gr.Error(str(err), print_exception=not quiet_refusals) from err
    CLASS.add_run(comp)  # "everyone on this server" counts API runs too (numbers only)
    plain = comp.lane(PLAIN)
    out_lanes = []
    for lane in comp.lanes:
        summary = lane.summary or {}
        stats = metrics.summarize(lane.events)
        tps = stats["tokens_per_s"]
        out_lanes.append({
            "method": lane.method, "label": lane.label, "text": lane.text, "error": lane.error,
            "stop_reason": summary.get("stop_reason"), "tree_budget": lane.budget, "budget_auto": lane.budget_auto,
            "budget_note": _budget_note(comp, lane),
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


def api_spec(prompt: str, methods: list[str], preset: str, max_new_tokens: int = 64, temperature: float = 0.0,
             top_p: float = 1.0, depth: int = 0, top_k: int = 0, tree_budget: int = 0, seed: int = 0,
             precision: str = "auto", quiet_refusals: bool = False) -> compare.RunSpec:
    """What a /compare call runs, checked (the UI's bounds and this server's limits); a refused input raises
    gr.Error before the call waits for a live slot."""
    try:
        d = ui_defaults(get_preset(preset))
        settings = RunSettings(prompt, False, preset, methods, temperature, top_p, depth or d["depth"],
                               top_k or d["top_k"], tree_budget or d["tree_budget"], max_new_tokens, seed, "auto",
                               auto_budget=not tree_budget, precision=precision)
        spec = settings.spec([])
        spec.check()
        return spec
    except PossError as err:
        raise gr.Error(str(err), print_exception=not quiet_refusals) from err


def _budget_note(comp: compare.Comparison, lane: compare.Lane) -> str | None:
    """Why a draft lane that asked for an auto budget decodes on the default one (none needed otherwise)."""
    if not comp.spec.auto_budget or lane.budget_auto or lane.budget is None or lane.method == "oracle":
        return None
    why = ("this server fits tree budgets only at start-up" if not state.CALL_FITS else
           "the server was still fitting it")
    return f"the default tree budget ({lane.budget}): {why}, and none is cached for this draft, depth and top-k"


def compare_endpoint(app_preset: str, wrap: Callable = lambda fn: fn):
    """`compare_api` as the app serving `app_preset` offers it: an empty preset means that one.

    The endpoint is an async generator: it checks the input, waits for a live slot (share.LIVE, the queue every live
    run takes turns in) yielding {"queued": true, "place": k, "wait_s": estimate} every PROGRESS_EVERY_S, then runs
    the comparison in a worker thread and yields a small progress value ({"running": true, "seconds": s}) every
    PROGRESS_EVERY_S until the answer, its last value. When the client
    cancels the call Gradio cancels it, and when the client goes away Gradio closes it at its next yield: either way
    the call's cancel flag is set and everything it started (loads, fits, the oracle's reference decode, the lanes)
    stops within one round instead of running on to the time limit. `wrap` decorates the worker (ZeroGPU's decorator
    on a Space)."""
    work = wrap(compare_api)

    async def compare(prompt: str, methods: list[str], preset: str = "", max_new_tokens: int = 64,
                      temperature: float = 0.0, top_p: float = 1.0, depth: int = 0, top_k: int = 0,
                      tree_budget: int = 0, seed: int = 0, precision: str = "auto",
                      request: gr.Request = None) -> dict:
        cancel = threading.Event()
        call = functools.partial(work, prompt, methods, preset or app_preset, max_new_tokens, temperature, top_p,
                                 depth, top_k, tree_budget, seed, precision, cancel=cancel, quiet_refusals=True)
        with share.running(request):
            spec = api_spec(prompt, methods, preset or app_preset, max_new_tokens, temperature, top_p, depth, top_k,
                            tree_budget, seed, precision, quiet_refusals=True)
            try:
                ticket = share.LIVE.join(work=len(spec.methods) * int(spec.max_new_tokens))
            except PossError as err:
                raise gr.Error(str(err), print_exception=False) from err
            try:
                shown = 0.0
                while not share.LIVE.try_start(ticket):
                    if time.monotonic() - shown >= PROGRESS_EVERY_S:
                        shown = time.monotonic()
                        yield {"queued": True, "place": share.LIVE.place(ticket),
                               "wait_s": round(share.LIVE.estimate_s(ticket), 1)}
                    await asyncio.sleep(QUEUE_POLL_S)
                began = time.monotonic()
                answer = asyncio.get_running_loop().run_in_executor(None, call)
                try:
                    while True:
                        done, _ = await asyncio.wait({answer}, timeout=PROGRESS_EVERY_S)
                        if done:
                            break
                        yield {"running": True, "seconds": round(time.monotonic() - began, 1)}
                except (asyncio.CancelledError, GeneratorExit):  # cancelled, or closed because the client went away
                    cancel.set()
                    raise
            finally:
                share.LIVE.leave(ticket)
        yield answer.result()

    compare.__doc__ = compare_api.__doc__
    return compare
