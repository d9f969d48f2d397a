"""The /compare API endpoint: one comparison without streaming, each lane's text and summary as JSON."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import gradio as gr

from app.server import client_share, limits, live_queue
from app.server.class_pool import CLASS
from app.server.server_text import REFUSED, neutral_paths
from app.sessions.user_settings import RunSettings
from app.views import control_defaults
from app.views.control_defaults import ui_defaults
from poss_core.base import settings
from poss_core.base.errors import ConfigError, PossError
from poss_core.base.json_safe import clean_json
from poss_core.models.presets import DEFAULT_PRESET, get_preset
from poss_core.rounds import metrics
from poss_core.runtime import compare
from poss_core.runtime.call_cap import CallCap
from poss_core.runtime.methods import PLAIN

PROGRESS_EVERY_S = 1.0  # how often /compare yields while it works: the points where a gone client is noticed


# The /compare parameters after prompt, methods and preset: the settings the API offers, in the table's order (that of
# /run's inputs) except max_new_tokens, which /compare's clients give first, and auto_budget, which came later and goes
# last so that a client's positional values keep their places. One the app sets per preset
# (control_defaults.PRESET_SETTINGS: depth, top_k, tree_budget, max_new_tokens) defaults to 0, which means the app's
# default for the preset (control_defaults.ui_defaults).
_FIRST, _LAST = ("max_new_tokens",), ("auto_budget",)
API_SETTINGS = _FIRST + tuple(n for n in settings.offered_on(settings.API) if n not in _FIRST + _LAST) + _LAST
API_DEFAULTS = {n: 0 if n in control_defaults.PRESET_SETTINGS else settings.SETTINGS[n].default for n in API_SETTINGS}


def api_signature() -> inspect.Signature:
    """The /compare endpoint's signature, from the settings table: what Gradio documents and clients call."""
    param = functools.partial(inspect.Parameter, kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return inspect.Signature(
        [
            param("prompt", annotation=str),
            param("methods", annotation=list[str]),
            param("preset", default="", annotation=str),
        ]
        + [param(n, default=API_DEFAULTS[n], annotation=settings.SETTINGS[n].kind) for n in API_SETTINGS]
        + [param("request", default=None, annotation=gr.Request)],
        return_annotation=dict,
    )


def compare_api(
    prompt: str,
    methods: list[str],
    preset: str = DEFAULT_PRESET,
    cancel: threading.Event | None = None,
    quiet_refusals: bool = False,
    run: compare.Resolved | None = None,
    address: str | None = None,
    **values,
) -> dict:
    """Run one comparison (no streaming) and return each lane's text and summary.

    methods: two or three of plain, eagle, hass, poss1, poss2, poss3, matched (the preset's drafts), oracle, pld.
    preset: a preset's name (empty: the one the app serves). max_new_tokens, depth, top_k, tree_budget (the nodes
    verified per round, root included): 0 for the app's defaults for the preset.
    auto_budget: true fits each draft's tree budget and depth stop to this machine, and tree_budget is ignored (the
    UI's "Fastest tree for this machine"; the first call per draft and setting calibrates it within the call's time
    limit, or, on a server started with --no-call-fits, uses the default budget where no fit is cached: the lane's
    "budget_note" says so).
    temperature, top_p, seed: sampling (temperature 0 is greedy). precision: the target's dtype, auto (fp32 on a
    CPU; bf16 on a GPU with bf16 units, fp16 on an older one), float32, bfloat16 or float16 (a GPU's).
    quantization: the target's weights, auto, none, 8bit or 4bit (bitsandbytes).
    Returns {"preset", "settings", "lanes": [{"method", "label", "text", "stop_reason", "tree_budget",
    "identical_to_plain", "speedup_vs_plain", "summary": {tau, pos_acc, pos_rate, accept_hist, tokens_per_s,
    new_tokens, rounds, ...}}],
    "timing", "timed_out"}. Lanes race in time, one round at a time; tokens/s counts each lane's own compute. Every
    setting has the app's bounds (base/settings.py); a call that runs past the server's per-call limit is stopped
    and says so ("timed_out": true, every lane's stop_reason "cancelled"); the limit's clock starts with the call, so
    loading, fitting and the oracle's reference decode count (a call whose limit runs out before its lanes start is
    refused with a message that says so). Setting `cancel` stops all of it within one round (a
    cancelled API call, or a client gone away). A refused input raises gr.Error (with `quiet_refusals`, without a
    traceback in the server's log)."""
    name = preset or DEFAULT_PRESET
    call = CallCap(limits.LIMITS.call_s, parent=cancel)
    # The endpoint checks its input where it arrives and passes the run on; a direct call is checked here.
    run = run or api_run(prompt, methods, name, quiet_refusals, **values)
    try:
        if call.is_set() and not call.timed_out:
            raise gr.Error("cancelled before the comparison started.", print_exception=not quiet_refusals)
        comp = compare.run_to_end(
            compare.start(run, cancel=call, wait_for_fits=False, new_fits=limits.LIMITS.call_fits)
        )
    except PossError as err:
        raise gr.Error(neutral_paths(str(err)), print_exception=not quiet_refusals) from err
    CLASS.add_run(comp, address)  # "everyone on this server" counts API runs too (numbers only), by address
    return clean_json(
        {
            "preset": name,
            "settings": comp.spec.to_json(),
            "lanes": [_lane_answer(comp, lane) for lane in comp.lanes],
            "hardware": {k: neutral_paths(v) if isinstance(v, str) else v for k, v in (comp.hardware or {}).items()},
            "timing": "lanes race in time, one round at a time; tokens/s counts each lane's own compute",
            "timed_out": comp.timed_out,
            **(
                {"note": f"stopped at the server's limit of {limits.LIMITS.call_s:g} s per call"}
                if comp.timed_out
                else {}
            ),
        }
    )


def _lane_answer(comp: compare.Comparison, lane) -> dict:
    """One lane of /compare's answer: its text, how it stopped, its tree call, whether it matched plain decoding
    token for token and its speed-up over it, and its summary."""
    plain = comp.lane(PLAIN)
    summary = lane.summary or {}
    stats = metrics.summarize(lane.events)
    against_plain = plain is not None and not lane.plain
    return {
        "method": lane.method,
        "label": lane.label,
        "text": lane.text,
        "error": neutral_paths(lane.error) if lane.error else lane.error,
        "stop_reason": summary.get("stop_reason"),
        "tree_budget": lane.tree_budget,
        "budget_auto": lane.budget_auto,
        "budget_note": _budget_note(comp, lane),
        "identical_to_plain": lane.token_ids == plain.token_ids if against_plain else None,
        "speedup_vs_plain": metrics.speedup(stats["tokens_per_s"], metrics.tokens_per_s(plain.events))
        if against_plain
        else None,
        "summary": stats,
    }


def api_run(prompt: str, methods: list[str], preset: str, quiet_refusals: bool = False, **values) -> compare.Resolved:
    """What a /compare call runs, checked (the UI's bounds and this server's limits): the API's defaults, then the
    app's defaults for the preset where a value is 0; a refused input raises gr.Error before the call waits for a live
    slot."""
    try:
        unknown = sorted(set(values) - set(API_SETTINGS))
        if unknown:
            raise ConfigError(f"{unknown[0]!r} is not a /compare parameter: use {', '.join(API_SETTINGS)}.")
        values = {**API_DEFAULTS, **values}
        d = ui_defaults(get_preset(preset))
        values.update({n: d[n] for n in control_defaults.PRESET_SETTINGS if not values[n]})
        asked = {"prompt": prompt, "multi_turn": False, "preset": preset, "methods": methods, **values}
        return RunSettings.from_named(asked).resolved([])
    except PossError as err:
        raise gr.Error(neutral_paths(str(err)), print_exception=not quiet_refusals) from err


def _retrieved(future: asyncio.Future) -> None:
    """Reads a finished worker's exception, so that its loss is not logged as never retrieved."""
    if not future.cancelled():
        future.exception()


def _budget_note(comp: compare.Comparison, lane: compare.Lane) -> str | None:
    """Why a draft lane that asked for an auto budget decodes on the default one (none needed otherwise)."""
    if not comp.spec.auto_budget or lane.budget_auto or lane.tree_budget is None or lane.method == "oracle":
        return None
    why = (
        "this server fits tree budgets only at start-up"
        if not limits.LIMITS.call_fits
        else "the server was still fitting it"
    )
    return f"the default tree budget ({lane.tree_budget}): {why}, and none is cached for this draft, depth and top-k"


# The threads /compare's comparisons run in, apart from asyncio's default pool (a few threads on a small machine, which
# Gradio and the event loop also use): a running call always has its thread, however many calls wait. At most one per
# live slot decodes at once (live_queue.LIVE), and --concurrency is at most 64.
_DECODING = ThreadPoolExecutor(max_workers=64, thread_name_prefix="poss-compare")
TURN_POLL_S = 0.1  # how often a waiting /compare call checks whether its turn has come


async def _turn(ticket: int, seconds: float) -> bool:
    """Wait up to `seconds` for this ticket's live slot without holding a thread: True once it runs."""
    deadline = time.monotonic() + seconds
    while not live_queue.LIVE.try_start(ticket):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(TURN_POLL_S)
    return True


def compare_endpoint(app_preset: str, wrap: Callable = lambda fn: fn):
    """`compare_api` as the app serving `app_preset` offers it: an empty preset means that one.

    The endpoint is an async generator: it checks the input, waits for a live slot (live_queue.LIVE, the line
    every live run takes turns in) yielding {"queued": true, "place": k, "wait_s": estimate} every PROGRESS_EVERY_S,
    then runs the comparison in a worker thread and yields a small progress value ({"running": true, "seconds": s})
    every PROGRESS_EVERY_S until the answer, its last value. When the client
    cancels the call Gradio cancels it, and when the client goes away Gradio closes it at its next yield: either way
    the call's cancel flag is set and everything it started (loads, fits, the oracle's reference decode, the lanes)
    stops within one round instead of running on to the time limit. `wrap` decorates the worker (ZeroGPU's decorator
    on a Space)."""
    work = wrap(compare_api)

    signature = api_signature()

    async def compare(*args, **kwargs) -> dict:
        given = signature.bind(*args, **kwargs)
        given.apply_defaults()
        a = dict(given.arguments)
        prompt, methods, request = a.pop("prompt"), a.pop("methods"), a.pop("request")
        preset = a.pop("preset") or app_preset
        cancel = threading.Event()
        with client_share.running(request):
            try:
                run = api_run(prompt, methods, preset, quiet_refusals=True, **a)
            except gr.Error:
                REFUSED("a /compare input that failed its checks", client_share.request_client(request)[1])
                raise
            spec = run.spec
            # The worker runs what was checked here; a ZeroGPU worker (another process) gets plain values instead.
            checked = {"run": run} if work is compare_api else {}
            address = client_share.request_client(request)[1]
            call = functools.partial(
                work, prompt, methods, preset, cancel=cancel, quiet_refusals=True, address=address, **checked, **a
            )
            try:
                units = len(spec.methods) * int(spec.max_new_tokens)
                ticket = live_queue.LIVE.join(units, *client_share.request_client(request))
            except PossError as err:
                raise gr.Error(str(err), print_exception=False) from err
            try:
                # Waits a second at a time on the event loop, then says where it is: a waiting call holds no thread.
                while not await _turn(ticket, PROGRESS_EVERY_S):
                    yield {
                        "queued": True,
                        "place": live_queue.LIVE.place(ticket),
                        "wait_s": round(live_queue.LIVE.estimate_s(ticket), 1),
                    }
                began = time.monotonic()
                answer = asyncio.get_running_loop().run_in_executor(_DECODING, call)
                try:
                    while True:
                        done, _ = await asyncio.wait({answer}, timeout=PROGRESS_EVERY_S)
                        if done:
                            break
                        yield {"running": True, "seconds": round(time.monotonic() - began, 1)}
                except (asyncio.CancelledError, GeneratorExit):  # cancelled, or closed because the client went away
                    cancel.set()
                    # Nobody awaits the worker now: take its outcome (a "cancelled" refusal) when it ends, or asyncio
                    # logs "Future exception was never retrieved" with its trace.
                    answer.add_done_callback(_retrieved)
                    raise
            finally:
                live_queue.LIVE.leave(ticket)
        yield answer.result()

    compare.__doc__ = compare_api.__doc__
    compare.__signature__ = signature  # what Gradio documents and binds clients' values to
    compare.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()} | {"return": dict}
    return compare
