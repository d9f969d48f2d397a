"""Per-session state, rendering of every output, and the event handlers: plain functions, testable directly."""

from __future__ import annotations

import html
import math
import sys
import tempfile
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr

from poss_core import metrics
from poss_core.errors import PossError, PromptError
from poss_core.models.presets import DEFAULT_PRESET, Preset, get_preset

from . import about, charts, lanes, runs
from .lanes import MAX_LANES, PLAIN, Comparison, Lane, RunSpec
from .render import identity_badge, legend_html, stat_line, status_html, tokens_html

DEFAULT_METHODS = ["plain", "eagle", "poss2"]
UPDATE_EVERY_S = 0.35  # the most often a running comparison repaints (lanes run flat out in between)
CHARTS_EVERY_S = 1.5  # the charts repaint less often than the lanes
MAX_RENDER_SHARE = 0.25  # repaint slower when drawing would take more than this share of the time
REPLAY_DELAY_S = 0.12  # pause between replayed rounds, so a replay reads like a live run
METHOD_COLORS = {"plain": charts.PLAIN_COLOR, "eagle": "#0072B2", "poss1": "#E69F00", "poss2": "#009E73",
                 "poss3": "#CC79A7", "matched": "#56B4E9", "hass": "#8C6BB1", "eagle-reproduce": "#F0E442"}
SHORT_NAMES = {"plain": "Plain", "eagle": "EAGLE", "poss1": "POSS-1", "poss2": "POSS-2", "poss3": "POSS-3",
               "matched": "Matched", "hass": "HASS", "eagle-reproduce": "EAGLE (retrained)"}
TIMING_NOTE = ("Lanes run **in turns, one round each**, in one thread: each lane's tokens/s counts only its own "
               "rounds' compute time, i.e. the speed it would get alone on this machine.")
LANE_PARTS = ("col", "head", "tokens", "text", "tree", "slider")
OUTPUT_NAMES = (["status", "legend", "conversation"]
                + [f"lane{i}_{part}" for i in range(MAX_LANES) for part in LANE_PARTS]
                + ["pos_acc", "feature_deviation", "accept_hist", "tokens_per_s", "hardware"])


def outputs_dict(values: list) -> dict[str, Any]:
    """A handler's output list keyed by OUTPUT_NAMES (for tests and readers)."""
    return dict(zip(OUTPUT_NAMES, values))


# ---------------------------------------------------------------- per-session state

@dataclass
class View:
    """How the lanes are drawn (the toggles); nothing here changes what runs."""

    color_by: str = "position"  # or "specialist"
    show_rejected: bool = False
    conditional: bool = True


@dataclass
class Session:
    """One browser tab's lanes. Two tabs never share one: the store keys sessions by Gradio's session hash."""

    lock: threading.Lock = field(default_factory=threading.Lock)  # one run, step or replay at a time
    comparison: Comparison | None = None  # what the lanes show
    stepping: bool = False  # `comparison` waits for the next Step
    loaded: Comparison | None = None  # a loaded run, not yet replayed or stepped through
    history: list[dict] = field(default_factory=list)  # the conversation so far (multi-turn)
    pins: dict[int, int] = field(default_factory=dict)  # lane -> round the user scrubbed the tree to
    status: tuple[str, str] = ("Type a prompt (or pick an example) and press Run.", "info")


class SessionStore:
    """Sessions by session hash, least recently used dropped past `capacity`."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    @staticmethod
    def key(request: Any) -> str:
        return str(getattr(request, "session_hash", None) or "local")

    def get(self, request: Any) -> Session:
        key = self.key(request)
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = Session()
                while len(self._sessions) > self.capacity:
                    self._sessions.popitem(last=False)
            self._sessions.move_to_end(key)
            return session

    def drop(self, request: Any) -> None:
        with self._lock:
            session = self._sessions.pop(self.key(request), None)
        if session is not None and session.comparison is not None:
            session.comparison.stop()

    def __len__(self) -> int:
        return len(self._sessions)


SESSIONS = SessionStore()


# ---------------------------------------------------------------- rendering

def short_name(lane: Lane) -> str:
    return SHORT_NAMES.get(lane.method, lane.label)


def _fmt(value: float, spec: str = ".1f", none: str = "–") -> str:
    return none if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def lane_head_html(lane: Lane, comp: Comparison, running: bool) -> str:
    """The lane's title, live figures (tokens/s, τ, rounds, speed-up over plain) and its badges."""
    ev = lane.events
    tps = metrics.tokens_per_s(ev) if ev else math.nan
    plain = comp.lane(PLAIN)
    items = [("tokens/s", _fmt(tps)), ("τ", _fmt(metrics.tau(ev), ".2f")),
             ("rounds", str(len(metrics.draft_rounds(ev)))), ("tokens", str(metrics.total_new_tokens(ev)))]
    if lane.budget is not None:
        items.append(("budget", f"{lane.budget} auto" if lane.budget_auto else str(lane.budget)))
    if lane.depth_stop:
        items.append(("depth stop", f"p < {lane.depth_stop:g}"))
    if plain is not None and not lane.plain and plain.events and ev:
        items.append(("vs plain", "×" + _fmt(metrics.speedup(tps, metrics.tokens_per_s(plain.events)), ".2f")))
    badges = []
    if not lane.plain:
        badges.append(identity_badge(lane.token_ids, plain.token_ids if plain is not None else None,
                                     float(comp.spec.temperature) == 0.0, lane.finished and plain is not None
                                     and plain.finished, comp.hardware.get("dtype", "")))
    if lane.error:
        state = f'<div class="poss-lane-error">⚠ {html.escape(lane.error)}</div>'
    elif lane.finished:
        reason = lane.stop_reason or ""
        nice = {"eos": "finished (end of answer)", "max_new_tokens": "finished (max new tokens)",
                "context_limit": "stopped at the context limit", "cancelled": "stopped"}.get(reason, reason)
        state = f'<span class="poss-note">{html.escape(nice)}</span>'
    else:
        state = f'<span class="poss-note">{"running…" if running else "paused (Step for the next round)"}</span>'
    if comp.replay:
        badges.append('<span class="poss-badge neutral">replay</span>')
    title, untrained = split_untrained(lane.label)
    if untrained:
        badges.insert(0, '<span class="poss-badge bad" title="No trained checkpoint is bundled for this draft yet: '
                         'it is a random draft, so almost nothing gets accepted.">untrained draft</span>')
    return (f'<div class="poss-lane-head"><h3>{html.escape(title)}</h3>{stat_line(items)}'
            f'<div>{"".join(badges)} {state}</div></div>')


def split_untrained(label: str) -> tuple[str, bool]:
    """("POSS-2 (3 specialists)", True) for a preset label that says its draft is untrained."""
    marker = " (untrained: no bundled draft yet)"
    return (label.replace(marker, ""), True) if marker in label else (label, False)


def lane_tree(lane: Lane, round_index: int | None) -> Any:
    if not lane.events:
        return charts.empty_figure("No round yet.", 360, f"{short_name(lane)}: draft tree")
    r = len(lane.events) - 1 if round_index is None else max(0, min(int(round_index), len(lane.events) - 1))
    event = lane.events[r]
    root = lane.pieces[r - 1][-1] if r > 0 and lane.pieces[r - 1] else "root"
    return charts.tree_figure(event, labels=lane.node_texts[r], root_label=root or "root",
                              bonus_label=lane.bonus_texts[r], title=f"{short_name(lane)}: draft tree, round {r}",
                              height=360)


def _slider(lane: Lane | None, value: int | None) -> Any:
    n = len(lane.events) if lane is not None else 0
    top = max(1, n - 1)
    return gr.Slider(minimum=0, maximum=top, value=min(top, n - 1 if value is None else value) if n else 0,
                     step=1, interactive=n > 1)


def chart_runs(comp: Comparison | None) -> tuple[dict[str, list], dict[str, str]]:
    if comp is None:
        return {}, {}
    runs_, colors = {}, {}
    for lane in comp.lanes:
        name = short_name(lane)
        runs_[name] = lane.events
        colors[name] = METHOD_COLORS.get(lane.method, charts.OKABE_ITO[len(colors) % 7])
    return runs_, colors


def conversation_html(history: list[dict]) -> str:
    if not history:
        return ('<div class="poss-conversation poss-note">Single turn. After a run, tick Multi-turn to ask a '
                'follow-up: the next Run then continues the conversation.</div>')
    turns = []
    for m in history:
        who = "you" if m.get("role") == "user" else "model"
        text = str(m.get("content", ""))
        turns.append(f"<b>{who}:</b> {html.escape(text[:300] + ('…' if len(text) > 300 else ''))}")
    return ('<div class="poss-conversation"><span class="poss-note">Conversation so far (continued when Multi-turn '
            'is ticked):</span><br>' + "<br>".join(turns) + "</div>")


def render(session: Session, view: View, status: tuple[str, str] | None = None, running: bool = False,
           with_charts: bool = True) -> list:
    """Every output the lanes, charts and status show, in OUTPUT_NAMES order (`with_charts=False` leaves the four
    charts as they are)."""
    if status is not None:
        session.status = status
    comp = session.comparison
    out: dict[str, Any] = {"status": status_html(*session.status)}
    depth = int(comp.spec.depth) if comp is not None else 6
    n_spec = 1
    if comp is not None:
        n_spec = max([1] + [n.specialist + 1 for lane in comp.lanes for e in lane.events[-3:] for n in e.nodes])
    out["legend"] = legend_html(view.color_by, depth, max(n_spec, 3))
    out["conversation"] = conversation_html(session.history)
    lanes_ = comp.lanes if comp is not None else []
    for i in range(MAX_LANES):
        p = f"lane{i}_"
        if i < len(lanes_):
            lane = lanes_[i]
            out[p + "col"] = gr.Column(visible=True)
            out[p + "head"] = lane_head_html(lane, comp, running)
            out[p + "tokens"] = ('<div class="poss-lane-tokens">'
                                 + tokens_html(lane.records, view.color_by, view.show_rejected,
                                               placeholder="waiting for the first round…") + "</div>")
            out[p + "text"] = lane.text
            pin = session.pins.get(i)
            out[p + "tree"] = lane_tree(lane, pin)
            out[p + "slider"] = _slider(lane, pin)
        else:
            visible = comp is None and i < len(DEFAULT_METHODS)
            out[p + "col"] = gr.Column(visible=visible)
            out[p + "head"] = ""
            out[p + "tokens"] = ('<div class="poss-lane-tokens">' + tokens_html(
                [], placeholder="Press Run to stream this lane.") + "</div>")
            out[p + "text"] = ""
            out[p + "tree"] = charts.empty_figure("The latest round's draft tree appears here.", 360, "Draft tree")
            out[p + "slider"] = _slider(None, None)
    runs_, colors = chart_runs(comp)
    if not with_charts:
        for name in ("pos_acc", "feature_deviation", "accept_hist", "tokens_per_s"):
            out[name] = gr.skip()
        out["hardware"] = gr.skip()
        return [out[name] for name in OUTPUT_NAMES]
    out["pos_acc"] = charts.pos_acc_figure(runs_, conditional=view.conditional, colors=colors)
    out["feature_deviation"] = charts.feature_deviation_figure(runs_, colors=colors)
    out["accept_hist"] = charts.accept_hist_figure(runs_, colors=colors)
    out["tokens_per_s"] = charts.tokens_per_s_figure(runs_, colors=colors)
    info = comp.hardware if comp is not None and comp.hardware else _loaded_hardware()
    note = "Showing a saved run: the hardware it was recorded on." if comp is not None and comp.replay else ""
    out["hardware"] = about.hardware_markdown(info, note)
    return [out[name] for name in OUTPUT_NAMES]


def _loaded_hardware() -> dict[str, str] | None:
    loaded = lanes.MODELS.loaded_targets()
    return lanes.hardware_info(loaded[-1]) if loaded else None


def _skip_all(session: Session, status: tuple[str, str]) -> list:
    """Change only the status line."""
    session.status = status
    return [status_html(*status)] + [gr.skip()] * (len(OUTPUT_NAMES) - 1)


# ---------------------------------------------------------------- handlers

def build_spec(prompt: str, multi_turn: bool, history: list[dict], preset: str, methods: list[str],
               temperature: float, top_p: float, depth: float, top_k: float, tree_budget: float,
               max_new_tokens: float, seed: float, quantization: str, auto_budget: bool = False,
               precision: str = "auto") -> RunSpec:
    """The settings of a Run from the UI's values (raises PossError with a readable message)."""
    if not str(prompt or "").strip():
        raise PromptError("the prompt is empty: type a question or instruction (or pick an example).")
    if multi_turn and history:
        message: str | list[dict] = list(history) + [{"role": "user", "content": prompt}]
    else:
        message = prompt
    order = [PLAIN] + list(get_preset(preset).drafts)
    chosen = sorted(set(methods or []), key=lambda m: order.index(m) if m in order else len(order))

    def num(v, cast):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return v
        return cast(v) if cast is int and float(v).is_integer() else (float(v) if cast is float else v)

    return RunSpec(prompt=message, methods=chosen, preset=preset, temperature=num(temperature, float),
                   top_p=num(top_p, float), depth=num(depth, int), top_k=num(top_k, int),
                   tree_budget=num(tree_budget, int), max_new_tokens=num(max_new_tokens, int),
                   seed=num(seed, int), quantization=quantization or "auto", auto_budget=bool(auto_budget),
                   precision=precision or "auto")


def _remember_turn(session: Session, comp: Comparison) -> None:
    """After a live run: the conversation now ends with this turn's answer (the plain lane's, else the first)."""
    if comp.replay:
        return
    ref = comp.lane(PLAIN) or next((lane for lane in comp.lanes if lane.events), None)
    if ref is None:
        return
    session.history = comp.spec.messages() + [{"role": "assistant", "content": ref.text}]


def _final_status(comp: Comparison) -> tuple[str, str]:
    errors = [f"{short_name(lane)}: {lane.error}" for lane in comp.lanes if lane.error]
    if errors:
        return "Some lanes failed: " + " | ".join(errors), "error"
    if comp.cancelled or any(lane.stop_reason == "cancelled" for lane in comp.lanes):
        return "Stopped: every lane was cancelled cleanly. Run again whenever you like.", "info"
    what = "Replay finished" if comp.replay else "Done"
    tokens = ", ".join(f"{short_name(lane)} {metrics.total_new_tokens(lane.events)}" for lane in comp.lanes)
    return f"{what}: new tokens {tokens}. Hover tokens for details; scrub the trees with the round sliders.", "info"


def _stream(session: Session, view: View, comp: Comparison, label: str) -> Iterator[list]:
    """Turn the lanes until done, repainting at most every UPDATE_EVERY_S (and after the last round).

    Drawing happens between rounds, outside every lane's timing; on a slow CPU it backs off so that it takes at
    most MAX_RENDER_SHARE of the time."""
    last, last_charts, gap = 0.0, 0.0, UPDATE_EVERY_S
    try:
        while True:
            if comp.replay and comp.cancelled:  # replayed lanes do not watch the flag themselves
                comp.drain()
                break
            alive = comp.turn()
            if not alive:
                break
            if comp.replay:
                time.sleep(REPLAY_DELAY_S)
            now = time.monotonic()
            if now - last >= gap:
                rounds = max(len(lane.events) for lane in comp.lanes)
                with_charts = now - last_charts >= CHARTS_EVERY_S
                frame = render(session, view, (f"{label}: round {rounds}… (Stop cancels every lane)", "busy"),
                               running=True, with_charts=with_charts)
                last = time.monotonic()
                gap = max(UPDATE_EVERY_S, (last - now) / MAX_RENDER_SHARE)
                if with_charts:
                    last_charts = last
                yield frame
    finally:
        comp.close()
    _remember_turn(session, comp)
    yield render(session, view, _final_status(comp))


def _guard(session: Session, view: View, fn) -> Iterator[list]:
    """Run a handler body: PossErrors become the status line, anything else is logged and shown in one line."""
    try:
        yield from fn()
    except PossError as err:
        yield render(session, view, (str(err), "error"))
    except Exception as err:  # a bug must not take the app down or show a traceback to the user
        traceback.print_exc(file=sys.stderr)
        yield render(session, view, (f"Something went wrong ({type(err).__name__}: {err}). The app is still "
                                     f"running: try again or change the settings.", "error"))


def run_handler(prompt: str, multi_turn: bool, preset: str, methods: list[str], temperature: float, top_p: float,
                depth: float, top_k: float, tree_budget: float, max_new_tokens: float, seed: float,
                quantization: str, auto_budget: bool, precision: str, color_by: str, show_rejected: bool,
                pos_acc_mode: str, request: gr.Request | None = None) -> Iterator[list]:
    """Run a comparison: one lane per method on the same prompt and seed, streamed round by round."""
    session = SESSIONS.get(request)
    view = make_view(color_by, show_rejected, pos_acc_mode)
    if not session.lock.acquire(blocking=False):
        yield _skip_all(session, ("This tab is already running a comparison: press Stop first.", "error"))
        return
    try:
        def body():
            if session.comparison is not None:
                session.comparison.stop()
                session.comparison.close()
            session.stepping = False
            spec = build_spec(prompt, multi_turn, session.history, preset, methods, temperature, top_p, depth,
                              top_k, tree_budget, max_new_tokens, seed, quantization, auto_budget, precision)
            spec.check()
            session.pins.clear()
            yield _skip_all(session, (f"Loading {spec.preset} and {len(spec.methods)} lane(s)…", "busy"))
            for line in lanes.fit_budgets(spec):
                yield _skip_all(session, (line, "busy"))
            comp = lanes.start(spec)
            session.comparison, session.loaded = comp, None
            yield from _stream(session, view, comp, "Running")

        yield from _guard(session, view, body)
    finally:
        session.lock.release()


def step_handler(prompt: str, multi_turn: bool, preset: str, methods: list[str], temperature: float, top_p: float,
                 depth: float, top_k: float, tree_budget: float, max_new_tokens: float, seed: float,
                 quantization: str, auto_budget: bool, precision: str, color_by: str, show_rejected: bool,
                 pos_acc_mode: str, request: gr.Request | None = None) -> list:
    """Advance every lane by one round (starting a new comparison, or a loaded run's replay, if none is paused)."""
    session = SESSIONS.get(request)
    view = make_view(color_by, show_rejected, pos_acc_mode)
    if not session.lock.acquire(blocking=False):
        return _skip_all(session, ("This tab is already running a comparison: press Stop first.", "error"))
    try:
        def body():
            comp = session.comparison
            if not (session.stepping and comp is not None and not comp.finished):
                if session.loaded is not None:
                    comp = runs.replay(session.loaded)
                    session.loaded = None
                else:
                    spec = build_spec(prompt, multi_turn, session.history, preset, methods, temperature, top_p,
                                      depth, top_k, tree_budget, max_new_tokens, seed, quantization, auto_budget,
                                      precision)
                    comp = lanes.start(spec)
                session.comparison, session.stepping = comp, True
                session.pins.clear()
            comp.turn()
            if comp.finished:
                comp.close()
                session.stepping = False
                _remember_turn(session, comp)
                yield render(session, view, ("Step mode: every lane has finished. " + _final_status(comp)[0],
                                             "info"))
            else:
                rounds = max(len(lane.events) - 1 for lane in comp.lanes)
                what = "the prefill (the target reads the prompt)" if rounds == 0 else f"round {rounds}"
                yield render(session, view, (f"Step mode: {what} done in every lane. Step again for the next "
                                             f"round, Run to start over, Stop to end.", "info"))

        return list(_guard(session, view, body))[-1]
    finally:
        session.lock.release()


def stop_handler(color_by: str, show_rejected: bool, pos_acc_mode: str, request: gr.Request | None = None) -> list:
    """Cancel every lane of this tab at once (a running comparison stops before its next round)."""
    session = SESSIONS.get(request)
    view = make_view(color_by, show_rejected, pos_acc_mode)
    comp = session.comparison
    if comp is None or comp.finished:
        return _skip_all(session, ("Nothing is running.", "info"))
    comp.stop()
    if session.lock.acquire(blocking=False):  # a paused Step session: finish its lanes here
        try:
            comp.drain()
            session.stepping = False
            _remember_turn(session, comp)
            return render(session, view, _final_status(comp))
        finally:
            session.lock.release()
    return _skip_all(session, ("Stopping every lane…", "busy"))


def replay_handler(color_by: str, show_rejected: bool, pos_acc_mode: str,
                   request: gr.Request | None = None) -> Iterator[list]:
    """Play back the loaded run (or the last one) round by round, without a model."""
    session = SESSIONS.get(request)
    view = make_view(color_by, show_rejected, pos_acc_mode)
    if not session.lock.acquire(blocking=False):
        yield _skip_all(session, ("This tab is already running: press Stop first.", "error"))
        return
    try:
        source = session.loaded or session.comparison
        if source is None or (not source.finished and source is session.comparison):
            yield _skip_all(session, ("Nothing to replay yet: Run a comparison or load a saved run.", "error"))
            return
        session.loaded = source
        comp = runs.replay(source)
        session.comparison, session.stepping = comp, False
        session.pins.clear()
        yield from _guard(session, view, lambda: _stream(session, view, comp, "Replaying"))
    finally:
        session.lock.release()


def view_handler(color_by: str, show_rejected: bool, pos_acc_mode: str, request: gr.Request | None = None) -> list:
    """Redraw after a toggle (colour by position/specialist, rejected drafts, conditional/unconditional)."""
    session = SESSIONS.get(request)
    return render(session, make_view(color_by, show_rejected, pos_acc_mode))


def tree_handler(lane_index: int, round_index: float, request: gr.Request | None = None) -> Any:
    """The tree of lane `lane_index` at a chosen round (the slider); the last round re-follows the live one."""
    session = SESSIONS.get(request)
    comp = session.comparison
    if comp is None or lane_index >= len(comp.lanes):
        return gr.skip()
    lane = comp.lanes[lane_index]
    r = int(round_index or 0)
    if r >= len(lane.events) - 1:
        session.pins.pop(lane_index, None)
    else:
        session.pins[lane_index] = r
    return lane_tree(lane, r)


def tree_for(lane_index: int):
    def handler(round_index: float, request: gr.Request = None) -> Any:
        return tree_handler(lane_index, round_index, request)

    return handler


def drop_session(request: gr.Request = None) -> None:
    SESSIONS.drop(request)


def save_handler(request: gr.Request | None = None) -> Any:
    """Write this tab's last run (all events plus settings) as JSONL and offer it for download."""
    session = SESSIONS.get(request)
    comp = session.comparison
    if comp is None or not any(lane.events for lane in comp.lanes):
        raise gr.Error("Nothing to save yet: run a comparison first.")
    folder = Path(tempfile.gettempdir()) / "poss-runs"
    name = f"poss-run-{time.strftime('%Y%m%d-%H%M%S')}-{SESSIONS.key(request)[:8]}.jsonl"
    return str(runs.save_run(comp, folder / name))


def load_handler(file: Any, color_by: str, show_rejected: bool, pos_acc_mode: str,
                 request: gr.Request | None = None) -> list:
    """Show a saved run as it ended; Replay plays it back, Step goes through it round by round."""
    session = SESSIONS.get(request)
    view = make_view(color_by, show_rejected, pos_acc_mode)
    if file is None:
        return _skip_all(session, session.status)
    path = file if isinstance(file, str) else getattr(file, "name", str(file))
    if session.lock.locked():
        return _skip_all(session, ("This tab is running: press Stop before loading a run.", "error"))
    try:
        comp = runs.load_run(path)
    except PossError as err:
        return render(session, view, (str(err), "error"))
    session.comparison, session.loaded, session.stepping = comp, comp, False
    session.pins.clear()
    prompt = comp.spec.messages()[-1].get("content", "")
    return render(session, view, (f"Loaded a saved run ({comp.spec.preset}, prompt: {prompt[:60]!r}). Replay "
                                  f"plays it back, Step goes through it round by round; no model needed.", "info"))


def new_conversation_handler(request: gr.Request | None = None) -> str:
    session = SESSIONS.get(request)
    session.history = []
    return conversation_html(session.history)


def make_view(color_by: str, show_rejected: bool, pos_acc_mode: str) -> View:
    return View(color_by="specialist" if str(color_by).startswith("spec") else "position",
                show_rejected=bool(show_rejected), conditional=not str(pos_acc_mode).startswith("uncond"))


def ui_defaults(preset: Preset) -> dict[str, Any]:
    """Tree settings for the UI: the paper's on a GPU; a smaller tree on a CPU, where verifying it costs more."""
    cpu = preset.device == "cpu"
    return {"depth": preset.depth, "top_k": min(preset.top_k, 8) if cpu else preset.top_k,
            "tree_budget": min(preset.tree_budget, 32) if cpu else preset.tree_budget,
            "max_new_tokens": 64 if cpu else 128, "auto_budget": True}


def draft_note(preset: Preset) -> str:
    untrained = [name for name, ref in preset.drafts.items() if "untrained" in ref.label]
    text = html.escape(preset.description)
    if untrained:
        text += (f'<br>⚠ No trained draft is bundled for {", ".join(SHORT_NAMES.get(n, n) for n in untrained)}:'
                 f' those lanes use <b>untrained</b> random drafts, so almost nothing gets accepted.')
    return f'<div class="poss-note">{text}</div>'


def preset_handler(preset_name: str) -> list:
    """New preset: its methods, tree settings and draft notes."""
    try:
        preset = get_preset(preset_name)
    except PossError as err:
        return [gr.skip()] * 6 + [status_html(str(err), "error")]
    d = ui_defaults(preset)
    choices = lanes.method_choices(preset)
    keep = [m for m in DEFAULT_METHODS if m in dict((v, k) for k, v in choices)]
    return [gr.CheckboxGroup(choices=choices, value=keep), gr.Slider(value=d["depth"]), gr.Slider(value=d["top_k"]),
            gr.Slider(value=d["tree_budget"]), gr.Slider(value=d["max_new_tokens"]), draft_note(preset),
            gr.skip()]


# ---------------------------------------------------------------- the API endpoint

def _clean(obj: Any) -> Any:
    return runs._clean(obj)


def compare_api(prompt: str, methods: list[str], preset: str = "", max_new_tokens: int = 64,
                temperature: float = 0.0, top_p: float = 1.0, depth: int = 0, top_k: int = 0, tree_budget: int = 0,
                seed: int = 0, precision: str = "auto") -> dict:
    """Run one comparison (no streaming) and return each lane's text and summary.

    methods: two or three of plain, eagle, poss1, poss2, poss3, matched (the preset's drafts).
    preset: empty for the app's preset. depth, top_k: 0 for the UI's defaults. tree_budget: 0 fits each draft's
    budget to this machine (auto, as the UI does by default; the first call per draft calibrates it).
    precision: auto (fp32 on a CPU, bf16 on a GPU), float32 or bfloat16, the target's dtype.
    Returns {"preset", "settings", "lanes": [{"method", "label", "text", "stop_reason", "tree_budget", "identical_to_plain",
    "speedup_vs_plain", "summary": {tau, pos_acc, pos_rate, accept_hist, tokens_per_s, new_tokens, rounds, ...}}],
    "timing"}. Lanes run in turns, one round each; tokens/s counts each lane's own compute."""
    name = preset or APP_PRESET[0]
    try:
        p = get_preset(name)
        d = ui_defaults(p)
        spec = build_spec(prompt, False, [], name, list(methods or []), temperature, top_p, depth or d["depth"],
                          top_k or d["top_k"], tree_budget or d["tree_budget"], max_new_tokens, seed, "auto",
                          auto_budget=not tree_budget, precision=precision)
        comp = lanes.run_to_end(lanes.start(spec))
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
    return _clean({"preset": name, "settings": spec.to_json(), "lanes": out_lanes, "hardware": comp.hardware,
                   "timing": "lanes run in turns, one round each; tokens/s counts each lane's own compute"})


APP_PRESET = [DEFAULT_PRESET]
