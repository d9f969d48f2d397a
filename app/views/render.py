"""What a handler sends to the page: the lane headers, trees, round accounts and sliders, the conversation, and
`render`, which returns what changed keyed by output name (OUTPUT_NAMES; token HTML in app/views/token_html.py, the
charts' sources in app/views/chart_view.py), and `by_component`, which keys such a frame by component for Gradio."""

from __future__ import annotations

import functools
import html
import inspect
import math
from collections.abc import Callable
from typing import Any

import gradio as gr

from app.server.server_text import neutral_paths
from app.sessions import machine, state
from app.sessions.state import DEFAULT_METHODS, Session
from app.sessions.user_settings import View
from app.views import about, chart_fit
from app.views.chart_view import CHART_NAMES, chart_outputs
from app.views.token_html import (
    badge_html,
    identity_badge,
    legend_html,
    special_mark,
    stat_line,
    status_html,
    tokens_html,
)
from poss_core.models.hardware import hardware_info
from poss_core.models.presets import DEFAULT_PRESET, Preset, get_preset
from poss_core.rounds import metrics
from poss_core.rounds.explain import explain_round
from poss_core.runtime import methods
from poss_core.runtime.compare import Comparison, Lane
from poss_core.runtime.model_cache import MODELS
from poss_core.runtime.run_spec import MAX_LANES
from poss_core.views import draft_tree, figures

LANE_PARTS = ("col", "head", "tokens", "text", "tree", "slider", "explain")


Frame = dict[str, Any]  # what a handler sends: the outputs it changes, keyed by name (the rest stay as they are)

OUTPUT_NAMES = (
    ("status", "legend", "conversation", "race")
    + tuple(f"lane{i}_{part}" for i in range(MAX_LANES) for part in LANE_PARTS)
    + CHART_NAMES
    + ("hardware",)
)


def _fmt(value: float, spec: str = ".1f", none: str = "–") -> str:
    return none if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


# A finished lane's state in words (its `data-lane-state` is the stop reason itself); a cut answer says why.
STOP_WORDS = {
    "eos": "finished: the answer ended",
    "context_limit": "stopped at the context limit",
    "cancelled": "stopped",
}


def stop_words(reason: str, max_new_tokens: int) -> str:
    if reason == "max_new_tokens":
        return f"cut off at the {max_new_tokens}-token limit (Max new tokens, in Settings)"
    return STOP_WORDS.get(reason, reason)


def where_html(lane: Lane, comp: Comparison) -> str:
    """The line under a lane's figures that says where its speed comes from: live on this machine or recorded on
    another (which CPU or GPU), the precision and the tree; a recording's lane adds this machine's live figures for
    the same lane and settings once a live run here measured them."""
    made = machine.machine_of(comp)
    parts = [f"recorded on {made}" if comp.replay else f"live on {made}", machine.precision_of(comp)]
    tree = machine.tree_of(comp, lane)
    if tree:
        parts.append(tree)
    line = (
        f'<div class="poss-where" data-where="{"recorded" if comp.replay else "live"}">{html.escape(" · ".join(parts))}'
    )
    if comp.replay:
        here = machine.SPEEDS.here(comp, lane, methods.PLAIN)
        if here is not None:
            speed, up = here
            runs = f"{speed.runs} live run{'s' if speed.runs != 1 else ''}"
            figures_here = f"{_fmt(speed.tokens_per_s)} tokens/s" + (f", ×{_fmt(up, '.2f')} vs plain" if up else "")
            line += (
                f'<br><span data-here="1">Not this race: live runs of this lane on this machine '
                f"({html.escape(machine.cpu_name())}, {runs}) measured {html.escape(figures_here)}</span>"
            )
    return line + "</div>"


def race_html(comp: Comparison | None) -> str:
    """The line above the lanes that says what their clock is: a race in time (each lane shown at the same amount
    of its own measured time, live or as recorded), or Step's round for round: a short statement, and why in its
    tooltip."""
    how = "The lane that has spent the least of its own time runs next, so token counts show the lanes' speeds."
    if comp is None:
        kind, head, note = "idle", "The lanes race in time.", how
    elif comp.stepped:
        kind = "step"
        head = "Step mode: one round of every lane per Step."
        note = (
            "The lanes stand round for round, not at equal time (a draft lane moves τ tokens a round); the speed-ups "
            "come from each lane's own time."
        )
    else:
        own = "recorded" if comp.replay else "own"
        if comp.finished:
            kind = "over"
            times = ", ".join(f"{lane.short} {metrics.wall_seconds(lane.events):.1f} s" for lane in comp.lanes)
            head, note = f"Race over. Each lane's {own} time: {times}.", ""
        else:
            kind = "race"
            head = f"Race clock: each lane shown at {comp.race_ms / 1000.0:.1f} s of its {own} time."
            note = (
                "A replay plays at its recorded speed. " if comp.replay else "Lanes take turns on this machine. "
            ) + how
    clock = f' data-clock-ms="{comp.race_ms:.0f}"' if comp is not None else ""
    tip = f' title="{html.escape(note)}"' if note else ""  # one line on a projector: the why is in its tooltip
    return f'<div class="poss-race" data-race="{kind}"{clock}{tip}><b>{html.escape(head)}</b></div>'


def lane_head_html(lane: Lane, comp: Comparison, running: bool) -> str:
    """The lane's title, live figures (tokens/s, τ, rounds, speed-up over plain), where they come from (machine,
    precision, tree) and its badges."""
    ev = lane.events
    tps = metrics.tokens_per_s(ev) if ev else math.nan
    plain = comp.lane(methods.PLAIN)
    items = [
        ("tokens_per_s", _fmt(tps)),
        ("tau", _fmt(metrics.tau(ev), ".2f")),
        ("rounds", str(len(metrics.draft_rounds(ev)))),
        ("tokens", str(metrics.total_new_tokens(ev))),
    ]
    if lane.tree_budget is not None:
        items.append(("budget", f"{lane.tree_budget} auto" if lane.budget_auto else str(lane.tree_budget)))
    if lane.depth_stop:
        items.append(("depth_stop", f"{lane.depth_stop:g}"))
    up = comp.speedup(lane)  # from the first round on, on the race's clock; frozen once the lane finished
    if up is not None:
        items.append(("vs_plain", "×" + _fmt(up, ".2f")))
    badges = []
    if not lane.plain:
        greedy = float(comp.spec.temperature) == 0.0
        badges.append(
            identity_badge(
                lane.token_ids,
                plain.token_ids if plain is not None else None,
                greedy,
                lane.finished and plain is not None and plain.finished,
                comp.divergence(lane) if greedy else None,
            )
        )
    if lane.error:
        state = f'<div class="poss-lane-error">⚠ {html.escape(neutral_paths(lane.error))}</div>'
    elif lane.finished:
        reason = lane.stop_reason or ""
        nice = stop_words(reason, int(comp.spec.max_new_tokens))
        state = f'<span class="poss-note" data-lane-state="{html.escape(reason)}">{html.escape(nice)}</span>'
    else:
        now = "running" if running else "paused"
        state = (
            f'<span class="poss-note" data-lane-state="{now}">'
            f"{'running…' if running else 'paused (Step for the next round)'}</span>"
        )
    if comp.replay:
        badges.append(badge_html("recording", name="replay", title=f"recorded on {machine.machine_of(comp)}"))
    if not lane.trained:
        badges.insert(
            0,
            badge_html(
                "untrained draft",
                "bad",
                "No trained checkpoint is bundled for this draft yet: it "
                "is a random draft, so almost nothing gets accepted.",
                "untrained",
            ),
        )
    return (
        f'<div class="poss-lane-head"><h3>{html.escape(lane.label)}</h3>{stat_line(items)}{where_html(lane, comp)}'
        f"<div>{''.join(badges)} {state}</div></div>"
    )


def empty_tree() -> Any:
    """A lane's tree before its first round."""
    return figures.empty_figure("The latest round's draft tree appears here.", 360, "Draft tree")


def idle_lanes(session: Session) -> tuple[Preset, list[str]]:
    """The lanes a tab shows before its first run: the methods ticked there (Settings), else the default ones, on
    the preset picked there, else the one the app serves first."""
    name, chosen = session.idle_methods or (state.APP_PRESET or DEFAULT_PRESET, None)
    preset = get_preset(name)
    offered = methods.lane_methods(preset)
    if chosen is None:
        chosen = [m for m in DEFAULT_METHODS if m in offered]
    return preset, [m for m in chosen if m in offered][:MAX_LANES]


def idle_head_html(method: str, preset: Preset) -> str:
    """A lane's header before its first run: the method's name, and what Run will show there."""
    label = methods.label_of(method, preset)
    what = "plain decoding: one token per forward pass" if methods.is_plain(method) else "speculative decoding"
    return (
        f'<div class="poss-lane-head"><h3>{html.escape(label)}</h3>'
        f'<div class="poss-where">{html.escape(what)}</div>'
        f'<div><span class="poss-note" data-lane-state="idle">waiting for ▶ Run (or an example)</span></div></div>'
    )


def shown_token(lane: Lane, token: int, text: str) -> str:
    """A token's text as the tree and the round's account show it: a special token (the end of the answer) as the
    token view's mark, never its raw name."""
    return special_mark(text) if token in lane.special_ids else text


def lane_tree(lane: Lane, round_index: int | None) -> Any:
    if not lane.events:
        return figures.empty_figure("No round yet.", 360, f"{lane.short}: draft tree")
    r = len(lane.events) - 1 if round_index is None else max(0, min(int(round_index), len(lane.events) - 1))
    event = lane.events[r]
    root = lane.pieces[r - 1][-1] if r > 0 and lane.pieces[r - 1] else "root"
    return draft_tree.tree_figure(
        event,
        labels=[shown_token(lane, n.token, label) for n, label in zip(event.nodes, lane.node_texts[r])],
        root_label=root or "root",
        bonus_label=shown_token(lane, event.bonus, lane.bonus_texts[r]),
        title=f"{lane.short}: draft tree, round {r}",
        height=360,
    )


EXPLAIN_EMPTY = '<div class="poss-round-account poss-note">Pick a round with the slider to read it in words.</div>'


def account_html(text: str) -> str:
    """An `explain_round` account as HTML: the first line a paragraph, "- " lines a list; every text escaped."""
    lines = [line for line in text.splitlines() if line.strip()]
    head = [line for line in lines if not line.startswith("- ")]
    items = [line[2:] for line in lines if line.startswith("- ")]
    body = "".join(f"<p>{html.escape(line)}</p>" for line in head)
    if items:
        body += "<ul>" + "".join(f"<li>{html.escape(item)}</li>" for item in items) + "</ul>"
    return f'<div class="poss-round-account">{body}</div>'


def lane_explain(lane: Lane, round_index: int | None, sampling: bool = False) -> str:
    """The chosen round (the latest when None) of a lane told in words, under its tree."""
    if not lane.events:
        return EXPLAIN_EMPTY
    r = len(lane.events) - 1 if round_index is None else max(0, min(int(round_index), len(lane.events) - 1))
    event = lane.events[r]
    known: dict[int, str] = {}
    labels = lane.node_texts[r] if r < len(lane.node_texts) else []
    for node, label in zip(event.nodes, labels):
        known.setdefault(node.token, label)
    if r < len(lane.bonus_texts):
        known[event.bonus] = lane.bonus_texts[r]

    def token_text(token: int) -> str:
        if token in known:
            return shown_token(lane, token, known[token])
        return shown_token(lane, token, lane.token_text(token) if lane.token_text is not None else f"#{token}")

    return account_html(explain_round(event, token_text, sampling=sampling))


def round_slider(lane: Lane | None, value: int | None) -> Any:
    """A lane's round slider (0 = the prefill), at `value` (the latest round when None)."""
    n = len(lane.events) if lane is not None else 0
    top = max(1, n - 1)
    return gr.Slider(
        minimum=0, maximum=top, value=min(top, n - 1 if value is None else value) if n else 0, step=1, interactive=n > 1
    )


def conversation_html(history: list[dict]) -> str:
    if not history:
        return (
            '<div class="poss-conversation poss-note">Single turn. After a run, tick Multi-turn to ask a '
            "follow-up: the next Run then continues the conversation.</div>"
        )
    turns = []
    for m in history:
        who = "you" if m.get("role") == "user" else "model"
        text = str(m.get("content", ""))
        turns.append(f"<b>{who}:</b> {html.escape(text[:300] + ('…' if len(text) > 300 else ''))}")
    return (
        '<div class="poss-conversation"><span class="poss-note">Conversation so far (continued when Multi-turn '
        "is ticked):</span><br>" + "<br>".join(turns) + "</div>"
    )


def draft_note(preset: Preset) -> str:
    """The preset's description, and which of its drafts are untrained stand-ins (the registry's `trained` flag)."""
    untrained = [m.short for m in methods.preset_methods(preset).values() if not m.trained]
    text = html.escape(preset.description)
    if untrained:
        text += (
            f"<br>⚠ No trained draft is bundled for {', '.join(untrained)}:"
            f" those lanes use <b>untrained</b> random drafts, so almost nothing gets accepted."
        )
    return f'<div class="poss-note">{text}</div>'


def lane_tokens_html(records: list, view: View, placeholder: str) -> str:
    """A lane's token view in its scrolling box. Left open at its end (the browser closes the box and the view): a
    running lane's view then only ever grows at its end, and Gradio sends each frame's new tokens instead of the
    whole view (its streaming diff appends where a value starts with the last one), which keeps a long run's frames
    small for the server and for every other tab waiting on it."""
    return '<div class="poss-lane-tokens">' + tokens_html(
        records, view.color_by, view.show_rejected, placeholder=placeholder, open_end=True
    )


def render(
    session: Session,
    view: View,
    status: tuple[str, str] | None = None,
    running: bool = False,
    with_charts: bool = True,
    with_trees: bool = True,
) -> Frame:
    """Every output the lanes, charts and status show, keyed by name (OUTPUT_NAMES; `with_charts=False` leaves the
    four charts and the hardware note as they are, `with_trees=False` each lane's tree, round slider and account)."""
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
    out["race"] = race_html(comp)
    lanes_ = comp.lanes if comp is not None else []
    for i in range(MAX_LANES):
        p = f"lane{i}_"
        if i < len(lanes_):
            lane = lanes_[i]
            out[p + "col"] = gr.Column(visible=True)
            out[p + "head"] = lane_head_html(lane, comp, running)
            out[p + "tokens"] = lane_tokens_html(lane.records, view, "waiting for the first round…")
            out[p + "text"] = lane.text
            pin = session.pins.get(i)
            if with_trees:
                out[p + "tree"] = lane_tree(lane, pin)
                out[p + "slider"] = round_slider(lane, pin)
                out[p + "explain"] = lane_explain(lane, pin, float(comp.spec.temperature) > 0.0)
        else:
            preset, idle = idle_lanes(session) if comp is None else (None, [])
            out[p + "col"] = gr.Column(visible=i < len(idle))
            out[p + "head"] = idle_head_html(idle[i], preset) if preset is not None and i < len(idle) else ""
            out[p + "tokens"] = lane_tokens_html([], view, "Press Run to stream this lane.")
            out[p + "text"] = ""
            if with_trees:
                out[p + "tree"] = empty_tree()
                out[p + "slider"] = round_slider(None, None)
                out[p + "explain"] = EXPLAIN_EMPTY
    if not with_charts:
        return out
    out.update(chart_outputs(session, view))
    info = comp.hardware if comp is not None and comp.hardware else loaded_hardware()
    note = "Showing a saved run: the hardware it was recorded on." if comp is not None and comp.replay else ""
    out["hardware"] = about.hardware_markdown(info, note)
    return out


def loaded_hardware() -> dict[str, str] | None:
    loaded = MODELS.loaded_targets()
    return hardware_info(loaded[-1]) if loaded else None


def status_only(session: Session, status: tuple[str, str], remember: bool = True) -> Frame:
    """Change only the status line (`remember=False`: a passing word the tab's next frame replaces, not kept as its
    status)."""
    if remember:
        session.status = status
    return {"status": status_html(*status)}


def by_component(handler: Callable[..., Any], components: dict[str, Any]) -> Callable[..., Any]:
    """`handler` for Gradio: each dict of outputs it returns or yields, keyed by name, keyed by component instead
    (Gradio leaves the event's other outputs as they are), or one skip for an empty dict; each chart fitted to the
    page's panels on the way (chart_fit.fit). Names are kept up to here so
    that handlers stay plain functions a test calls, and so that a ZeroGPU worker sends back only picklable values."""

    def keyed(out: dict[str, Any]) -> Any:
        return {components[name]: chart_fit.fit(value) for name, value in out.items()} or gr.skip()

    if inspect.isgeneratorfunction(handler):

        @functools.wraps(handler)
        def streamed(*args: Any, **kwargs: Any):
            for out in handler(*args, **kwargs):
                yield keyed(out)

        return streamed

    @functools.wraps(handler)
    def answered(*args: Any, **kwargs: Any) -> Any:
        return keyed(handler(*args, **kwargs))

    return answered
