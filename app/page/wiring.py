"""The Demo tab's wiring: each control's event to its handler, with the handler's inputs taken by name
(`controls.gathered(...).inputs`) and its outputs keyed by name (`render.by_component`). The event groups: live runs
wait for their slot in live_queue.LIVE (their status says place and estimate), not in Gradio's queue, where a waiting
call could not say where it stands; Step decodes in Gradio's "decode" group; replays need no model and draw a whole
class at once; view changes are light."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import gradio as gr

from app.actions import handlers, saved_files, view_handlers
from app.server import limits
from app.sessions import recordings, user_settings
from app.views import control_defaults, controls
from app.views.chart_view import CHART_NAMES
from app.views.render import OUTPUT_NAMES, by_component
from poss_core.runtime.run_spec import MAX_LANES

Components = dict[str, Any]

LOAD_CONCURRENCY = 2  # saved runs parsed at once (each is checked in full: up to a few seconds of CPU for a large one)
LIVE = {"concurrency_id": "live", "concurrency_limit": None}
LIGHT = {"concurrency_limit": None, "show_progress": "hidden"}


def replays() -> dict[str, Any]:
    """The replay group (the examples' recordings, Replay): no model work, only drawing, so a class's replays go
    quickly without waiting behind the live runs (which take turns in live_queue.LIVE); at most the server's
    --replay-concurrency at once, well below Gradio's line, so that replays alone never fill it."""
    return {"concurrency_id": "replay", "concurrency_limit": limits.LIMITS.replay_concurrency}


class Wiring:
    """The Demo tab's components by name, and how a handler becomes an event on them."""

    def __init__(self, c: Components, concurrency: int, gpu_wrap: Callable[[Callable], Callable]) -> None:
        self.c = c
        self.outputs = [c[name] for name in OUTPUT_NAMES]  # everything a Demo handler may redraw
        self.decode = {"concurrency_id": "decode", "concurrency_limit": concurrency}
        self.gpu = gpu_wrap

    def on_gpu(self, fn):
        """`fn` on a ZeroGPU worker where there is one, its named inputs kept."""
        wrapped = self.gpu(fn)
        wrapped.inputs = fn.inputs
        return wrapped

    def inputs(self, fn) -> list[Any]:
        return [self.c[name] for name in fn.inputs]

    def keyed(self, handler):
        return by_component(handler, self.c)

    def event(self, trigger, handler, outputs: list[Any] | None = None, inputs: list[Any] | None = None, **kw):
        """`trigger` calls `handler` (a `controls.gathered` wrapper, whose inputs are named) with its outputs keyed."""
        trigger(
            self.keyed(handler),
            self.inputs(handler) if inputs is None else inputs,
            self.outputs if outputs is None else outputs,
            **kw,
        )


def wire_demo(w: Wiring) -> None:
    """Every Demo event."""
    wire_decoding(w)
    wire_examples(w)
    wire_views(w)
    wire_lanes(w)
    wire_settings(w)
    wire_files(w)


def wire_decoding(w: Wiring) -> None:
    """Run (and Enter in the prompt), Step, Stop and Replay."""
    c = w.c
    run = w.on_gpu(controls.gathered(handlers.run_handler, settings=True))
    step = w.on_gpu(controls.gathered(handlers.step_handler, settings=True))
    w.event(c["run_btn"].click, run, api_name="run", **LIVE, show_progress="minimal")
    w.event(c["prompt"].submit, run, api_visibility="undocumented", **LIVE, show_progress="minimal")
    w.event(c["step_btn"].click, step, api_name="step", **w.decode, show_progress="minimal")
    w.event(c["stop_btn"].click, controls.gathered(handlers.stop_handler), api_name="stop", **LIGHT)
    replay = controls.gathered(handlers.replay_handler)
    w.event(c["replay_btn"].click, replay, api_name="replay", **replays(), show_progress="minimal")


def wire_examples(w: Wiring) -> None:
    """An example: its prompt goes into the box in the browser (no round trip), then its recording replays."""
    example = controls.gathered(handlers.example_handler, leading=("prompt", "preset"))
    for i, (button, ex) in enumerate(zip(w.c["example_btns"], recordings.EXAMPLES)):
        filled = button.click(None, None, w.c["prompt"], js=example_prompt_js(ex["prompt"]), queue=False)
        w.event(
            filled.then,
            example,
            api_name="example" if i == 0 else None,
            api_visibility="public" if i == 0 else "private",
            **replays(),
            show_progress="minimal",
        )


def example_prompt_js(prompt: str) -> str:
    """What an example's click puts in the prompt box: its prompt, unless the tab is busy (its status says so), when
    the box keeps the prompt whose answers are streaming (the handler then says to press Stop first)."""
    return (
        "() => document.querySelector('#poss-status .poss-status.busy') ? "
        f"document.querySelector('#poss-prompt textarea').value : {json.dumps(prompt)}"
    )


def wire_views(w: Wiring) -> None:
    """The view toggles, the charts' source (and the class charts' timer), the class reset and Forget my runs."""
    c = w.c
    view = controls.gathered(view_handlers.view_handler)
    for name in user_settings.VIEW_INPUTS:
        w.event(c[name].change, view, api_visibility="private", **LIGHT)
    c["charts_from"].change(
        lambda source: gr.Timer(active=source == user_settings.CLASS_VIEW),
        c["charts_from"],
        c["class_timer"],
        api_visibility="private",
        **LIGHT,
    )
    tick = controls.gathered(view_handlers.class_tick_handler)
    w.event(c["class_timer"].tick, tick, [c[n] for n in CHART_NAMES], api_visibility="private", **LIGHT)
    reset = controls.gathered(view_handlers.class_reset_handler, leading=("class_key",))
    w.event(c["class_reset_btn"].click, reset, [c["class_key"], *w.outputs], api_name="class_reset", **LIGHT)
    w.event(c["forget_btn"].click, controls.gathered(view_handlers.forget_handler), api_visibility="private", **LIGHT)


def wire_lanes(w: Wiring) -> None:
    """Each lane's round slider (dragging, and the number box) and its tokens (a click picks a round)."""
    c = w.c
    for i in range(MAX_LANES):
        slider, tree, explain = c[f"lane{i}_slider"], c[f"lane{i}_tree"], c[f"lane{i}_explain"]
        for trigger in (slider.input, slider.release):
            trigger(
                w.keyed(view_handlers.tree_for(i)),
                slider,
                [tree, explain],
                api_visibility="private",
                trigger_mode="always_last",
                **LIGHT,
            )
        c[f"lane{i}_tokens"].click(
            w.keyed(view_handlers.round_pick_for(i)),
            None,
            [slider, tree, explain],
            api_visibility="private",
            trigger_mode="always_last",
            **LIGHT,
        )


def wire_settings(w: Wiring) -> None:
    """A preset's defaults, the lanes named before a run, and a new conversation."""
    c = w.c
    c["preset"].change(
        w.keyed(view_handlers.preset_handler),
        c["preset"],
        [c["methods"], *(c[n] for n in control_defaults.PRESET_SETTINGS), c["draft_note"], c["status"]],
        api_visibility="private",
        **LIGHT,
    )
    c["methods"].change(
        w.keyed(view_handlers.idle_lanes_handler),
        [c["preset"], c["methods"]],
        [c[f"lane{i}_{part}"] for i in range(MAX_LANES) for part in ("col", "head")],
        api_visibility="private",
        **LIGHT,
    )
    c["new_conv"].click(
        w.keyed(view_handlers.new_conversation_handler), None, c["conversation"], api_visibility="private", **LIGHT
    )


def wire_files(w: Wiring) -> None:
    """Save (a file to download) and Load (a saved run, checked in full before it replaces what the tab shows)."""
    c = w.c
    c["save_btn"].click(saved_files.save_handler, None, c["saved"], api_name="save_run", **LIGHT)
    w.event(
        c["upload"].upload,
        controls.gathered(saved_files.load_handler, leading=("upload",)),
        [*w.outputs, c["prompt"]],
        api_name="load_run",
        concurrency_id="load",
        concurrency_limit=LOAD_CONCURRENCY,
        show_progress="hidden",
    )


def wire_page(demo: gr.Blocks, w: Wiring) -> None:
    """A page load draws the tab's outputs (also /view, which the load tool reads the class charts through); a
    closed tab lets go of its session."""
    load = controls.gathered(view_handlers.load_handler)
    w.event(demo.load, load, api_name="view", api_visibility="undocumented", **LIGHT)
    demo.unload(view_handlers.drop_session)
