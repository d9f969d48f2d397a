"""The handlers that redraw without decoding: the view toggles, a lane's round slider and token clicks, the class
pool's timer and reset, "Forget my runs", a new conversation, a new preset."""

from __future__ import annotations

from typing import Any

import gradio as gr

from app.server.class_pool import CLASS
from app.sessions import state
from app.sessions.state import DEFAULT_METHODS
from app.sessions.user_settings import View
from app.views import about, control_defaults
from app.views.chart_view import chart_outputs
from app.views.control_defaults import method_choices, ui_defaults
from app.views.render import (
    Frame,
    conversation_html,
    draft_note,
    idle_head_html,
    idle_lanes,
    lane_explain,
    lane_tree,
    loaded_hardware,
    render,
    round_slider,
)
from app.views.token_html import status_html
from poss_core.base.errors import PossError
from poss_core.models.presets import get_preset
from poss_core.runtime.run_spec import MAX_LANES


def class_reset_handler(key: str, view: View, request: gr.Request | None = None) -> Frame:
    """The class pool's reset: only with the key the app was started with (`--class-reset-key`); the key box is
    emptied either way."""
    session = state.SESSIONS.get(request)
    done, message = CLASS.reset(key)
    return {"class_key": ""} | render(session, view, (message, "info" if done else "error"))


def class_tick_handler(view: View, request: gr.Request | None = None) -> Frame:
    """The timer's redraw of the four charts while they show "everyone on this server": drawn again only when the
    class pool changed since this tab last drew it (else nothing is sent)."""
    session = state.SESSIONS.get(request, touch=False)  # a timer, not the tab acting: it never postpones reaping
    if not view.everyone or session.class_seen == (CLASS.version, view.conditional):
        return {}
    return chart_outputs(session, view)


def view_handler(view: View, request: gr.Request | None = None) -> Frame:
    """Redraw after a toggle (colour by position/specialist, rejected drafts, conditional/unconditional)."""
    session = state.SESSIONS.get(request, touch=False)  # reading only: it never postpones reaping what the tab holds
    return render(session, view)


def load_handler(view: View, request: gr.Request | None = None) -> Frame:
    """A page load (and /view): a tab with nothing on show gets its status and lanes only, its charts and trees
    being the empty ones the page starts with, so that opening the page costs the server almost nothing while a live
    run holds the CPU (an example clicked right away waits behind no figure); a tab with runs, or a view of pooled
    runs, gets everything."""
    session = state.SESSIONS.get(request, touch=False)
    light = session.comparison is None and not view.pooled and not view.everyone
    out = render(session, view, with_charts=not light, with_trees=not light)
    if light:
        out["hardware"] = about.hardware_markdown(loaded_hardware())
    return out


def tree_handler(lane_index: int, round_index: float, request: gr.Request | None = None) -> Frame:
    """The tree of lane `lane_index` at a chosen round (the slider) and that round told in words; the last round
    re-follows the live one."""
    session = state.SESSIONS.get(request, touch=False)
    comp = session.comparison
    if comp is None or lane_index >= len(comp.lanes):
        return {}
    lane = comp.lanes[lane_index]
    r = int(round_index or 0)
    if r >= len(lane.events) - 1:
        session.pins.pop(lane_index, None)
    else:
        session.pins[lane_index] = r
    return {
        f"lane{lane_index}_tree": lane_tree(lane, r),
        f"lane{lane_index}_explain": lane_explain(lane, r, float(comp.spec.temperature) > 0.0),
    }


def tree_for(lane_index: int):
    def handler(round_index: float, request: gr.Request = None) -> Frame:
        return tree_handler(lane_index, round_index, request)

    return handler


def round_pick_handler(lane_index: int, round_index: Any, request: gr.Request | None = None) -> Frame:
    """A clicked token's round: lane `lane_index`'s slider moves there, with its tree and account (slider, tree,
    account). Anything but a round the lane has leaves them as they are."""
    session = state.SESSIONS.get(request, touch=False)
    comp = session.comparison
    try:
        r = int(round_index)
    except (TypeError, ValueError):
        r = -1
    if comp is None or not 0 <= lane_index < len(comp.lanes) or not 0 <= r < len(comp.lanes[lane_index].events):
        return {}
    return {f"lane{lane_index}_slider": round_slider(comp.lanes[lane_index], r)} | tree_handler(lane_index, r, request)


def round_pick_for(lane_index: int):
    """Lane `lane_index`'s token click (the tokens' `data-round`, sent by token_html.TOKEN_CLICK_JS)."""

    def handler(evt: gr.EventData, request: gr.Request = None) -> Frame:
        data = evt._data if isinstance(getattr(evt, "_data", None), dict) else {}
        return round_pick_handler(lane_index, data.get("round"), request)

    return handler


def forget_handler(view: View, request: gr.Request | None = None) -> Frame:
    """ "Forget my runs": empty this tab's pooled runs (every preset's) and redraw."""
    session = state.SESSIONS.get(request)
    rounds = session.forget_runs()
    return render(
        session,
        view,
        (
            f'Forgot {rounds} pooled round{"s" if rounds != 1 else ""}: "All my runs" starts again with the next run.',
            "info",
        ),
    )


def drop_session(request: gr.Request = None) -> None:
    state.SESSIONS.drop(request)


def new_conversation_handler(request: gr.Request | None = None) -> Frame:
    session = state.SESSIONS.get(request)
    session.history = []
    return {"conversation": conversation_html(session.history)}


def idle_lanes_handler(preset_name: str, chosen: list[str], request: gr.Request | None = None) -> Frame:
    """Methods or preset changed in Settings: before the tab's first run its lanes follow them (shown, and named in
    their headers); once it shows a run, its lanes stay that run's until the next one."""
    session = state.SESSIONS.get(request, touch=False)
    if session.comparison is not None or not isinstance(preset_name, str):
        return {}
    try:
        get_preset(preset_name)
    except PossError:
        return {}
    session.idle_methods = (preset_name, [m for m in (chosen or []) if isinstance(m, str)])
    preset, idle = idle_lanes(session)
    out: Frame = {}
    for i in range(MAX_LANES):
        out[f"lane{i}_col"] = gr.Column(visible=i < len(idle))
        out[f"lane{i}_head"] = idle_head_html(idle[i], preset) if i < len(idle) else ""
    return out


def preset_handler(preset_name: str) -> Frame:
    """New preset: its methods, tree settings (keyed by setting name) and draft notes."""
    try:
        preset = get_preset(preset_name)
    except PossError as err:
        return {"status": status_html(str(err), "error")}
    d = ui_defaults(preset)
    choices = method_choices(preset)
    keep = [m for m in DEFAULT_METHODS if m in dict((v, k) for k, v in choices)]
    return (
        {"methods": gr.CheckboxGroup(choices=choices, value=keep)}
        | {n: gr.update(value=d[n]) for n in control_defaults.PRESET_SETTINGS}
        | {"draft_note": draft_note(preset)}
    )
