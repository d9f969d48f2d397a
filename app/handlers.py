"""The app's event handlers: plain functions of the settings (one `RunSettings`), the view (one `View`) and the
request, testable directly; each returns (or streams) every output through `render.render`."""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from poss_core import compare, methods, metrics, saved_runs
from poss_core.compare import CallBudget, Comparison
from poss_core.errors import CallStopped, PossError
from poss_core.models.presets import get_preset

from . import client_share, live_queue, recordings, state
from .class_pool import CLASS
from .render import (
    CHART_NAMES,
    chart_outputs,
    conversation_html,
    draft_note,
    lane_explain,
    lane_tree,
    render,
    round_slider,
    skip_all,
    status_html,
)
from .state import DEFAULT_METHODS, SESSIONS, RunSettings, Session, View, method_choices, ui_defaults

UPDATE_EVERY_S = 0.35  # the most often a running comparison repaints (lanes run flat out in between)
CHARTS_EVERY_S = 1.5  # the charts repaint less often than the lanes
MAX_RENDER_SHARE = 0.25  # repaint slower when drawing would take more than this share of the time
REPLAY_DELAY_S = 0.12  # pause between replayed rounds, so a replay reads like a live run
WAIT_FRAME_S = 0.5  # while a call loads or fits in a worker thread, its handler yields this often (see _waiting)
QUEUE_FRAME_S = 1.0  # while a live run waits for its slot, its status (place, estimate) is redrawn this often
QUEUE_POLL_S = 0.25  # how often a waiting run checks Stop (its slot wakes it at once)
MAX_PACE_S = 3.0  # a replay at its recorded timing waits at most this long between two turns

# How the final status line opens (tests/wording.py reads these rather than copying them).
DONE = "Done"
REPLAY_DONE = "Replay finished"
TAB_BUSY = "This tab is already running a comparison: press Stop first."


def _remember_turn(session: Session, comp: Comparison) -> None:
    """After a live run: the conversation now ends with this turn's answer (the plain lane's, else the first)."""
    if comp.replay:
        return
    ref = comp.lane(methods.PLAIN) or next((lane for lane in comp.lanes if lane.events), None)
    if ref is None:
        return
    session.history = comp.spec.messages() + [{"role": "assistant", "content": ref.text}]


def _final_status(comp: Comparison, note: str = "") -> tuple[str, str]:
    errors = [f"{lane.short}: {lane.error}" for lane in comp.lanes if lane.error]
    if errors:
        return "Some lanes failed: " + " | ".join(errors), "error"
    if comp.timed_out:
        return (
            f"Stopped at this server's limit of {state.CALL_LIMIT_S:g} s per call: every lane ended cleanly. "
            f"Ask for fewer new tokens or a smaller tree.",
            "info",
        )
    if comp.cancelled or any(lane.stop_reason == "cancelled" for lane in comp.lanes):
        return "Stopped: every lane was cancelled cleanly. Run again whenever you like.", "info"
    what = REPLAY_DONE if comp.replay else DONE
    tokens = ", ".join(f"{lane.short} {metrics.total_new_tokens(lane.events)}" for lane in comp.lanes)
    return (
        f"{what}: new tokens {tokens}. Hover tokens for details; scrub the trees with the round sliders."
        f"{' ' + note if note else ''}",
        "info",
    )


def _turn_ms(comp: Comparison, before: list[int]) -> float:
    """The recorded compute time of the turn just played: each lane's new round's wall_ms (lanes run in turns, so a
    turn of the live run took their sum)."""
    return sum(lane.events[-1].wall_ms for lane, n in zip(comp.lanes, before) if len(lane.events) > n)


def _stream(
    session: Session, view: View, comp: Comparison, label: str, paced: bool = False, note: str = ""
) -> Iterator[list]:
    """Turn the lanes until done, repainting at most every UPDATE_EVERY_S (and after the last round). `paced`: a
    replay keeps the timing it was recorded with (each turn waits for the previous turn's recorded compute, at most
    MAX_PACE_S), else a replayed round follows the last after REPLAY_DELAY_S; `note` ends the final status.

    Drawing happens between rounds, outside every lane's timing; on a slow CPU it backs off so that it takes at
    most MAX_RENDER_SHARE of the time."""
    # A paced replay (a class's examples, many at once) draws its trees only every CHARTS_EVERY_S (the first frame
    # none) and its charts once, at the end: its tokens show at once and the drawing costs the server little.
    last, last_charts, gap = 0.0, time.monotonic() if paced else 0.0, UPDATE_EVERY_S
    due = 0.0  # a paced replay's next turn is due then (the first round shows at once)
    if isinstance(comp.cancel, CallBudget):
        comp.cancel.limit(state.CALL_LIMIT_S)  # the per-call cap (a live run's clock began with its call)
    try:
        while True:
            if comp.replay and comp.cancelled:  # replayed lanes do not watch the flag themselves
                comp.drain()
                break
            if paced:
                time.sleep(max(0.0, due - time.monotonic()))
            before = [len(lane.events) for lane in comp.lanes]
            alive = comp.turn()
            if not alive:
                break
            if paced:
                due = time.monotonic() + min(MAX_PACE_S, _turn_ms(comp, before) / 1000.0)
            elif comp.replay:
                time.sleep(REPLAY_DELAY_S)
            now = time.monotonic()
            if now - last >= gap:
                rounds = max(len(lane.events) for lane in comp.lanes)
                heavy = now - last_charts >= CHARTS_EVERY_S
                frame = render(
                    session,
                    view,
                    (f"{label}: round {rounds}… (Stop cancels every lane)", "busy"),
                    running=True,
                    with_charts=heavy and not paced,
                    with_trees=heavy or not paced,
                )
                last = time.monotonic()
                gap = max(UPDATE_EVERY_S, (last - now) / MAX_RENDER_SHARE)
                if heavy:
                    last_charts = last
                yield frame
    finally:
        comp.close()
        session.pool_run(comp)  # also when the browser went away mid-run: its rounds so far count
    _remember_turn(session, comp)
    yield render(session, view, _final_status(comp, note))


def _queue_wait(session: Session, budget: CallBudget, ticket: int) -> Iterator[list]:
    """Wait for this live run's slot (live_queue.LIVE), showing its place in line and the estimated wait every
    QUEUE_FRAME_S; Stop (the budget) or a gone client leaves the line. The call's time cap starts with its slot."""
    shown = 0.0
    while not live_queue.LIVE.wait(ticket, QUEUE_POLL_S):
        if budget.is_set():
            raise CallStopped("Stopped while waiting in the queue: nothing ran. Run again whenever you like.")
        if time.monotonic() - shown >= QUEUE_FRAME_S:
            shown = time.monotonic()
            yield skip_all(session, (live_queue.LIVE.status(ticket), "busy"))
    budget.restart(state.CALL_LIMIT_S)


def _slot_blocking(budget: CallBudget, work: float, request: Any = None) -> int:
    """A live slot for a call that cannot stream its wait (a Step): blocks until it is this call's turn (Stop leaves
    the line); returns the ticket to leave with."""
    ticket = live_queue.LIVE.join(work, *client_share.request_client(request))
    while not live_queue.LIVE.wait(ticket, QUEUE_POLL_S):
        if budget.is_set():
            live_queue.LIVE.leave(ticket)
            raise CallStopped("Stopped while waiting in the queue: nothing ran. Step again whenever you like.")
    return ticket


def _waiting(budget: CallBudget, work, frame: list, discard=None) -> Iterator[list]:
    """Run `work()` (a load, a fit, a comparison's start) in a worker thread, yielding `frame` every WAIT_FRAME_S
    until it returns; its value is this generator's return value and its error is raised here. Gradio closes a
    handler's generator at a yield once its client has gone: the budget is then set, so the work stops within one
    round instead of running on to the cap with nobody watching; `discard` then receives what the work still
    returned (a started comparison is closed, not left holding its caches)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as err:  # noqa: BLE001 - handed to the handler's thread below
            box["error"] = err

    worker = threading.Thread(target=run, daemon=True, name="poss-call-start")
    worker.start()
    try:
        while worker.is_alive():
            worker.join(WAIT_FRAME_S)
            if worker.is_alive():
                yield frame
    except GeneratorExit:  # the client went away (or the tab closed) while the work was still going
        budget.set()
        if discard is not None:
            threading.Thread(target=_discard_when_done, args=(worker, box, discard), daemon=True).start()
        raise
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _discard_when_done(worker: threading.Thread, box: dict, discard) -> None:
    worker.join()
    if box.get("value") is not None:
        discard(box["value"])


def _guard(session: Session, view: View, fn) -> Iterator[list]:
    """Run a handler body: PossErrors become the status line, anything else is logged and shown in one line."""
    try:
        yield from fn()
    except PossError as err:
        yield render(session, view, (str(err), "error"))
    except Exception as err:  # a bug must not take the app down or show a traceback to the user
        traceback.print_exc(file=sys.stderr)
        yield render(
            session,
            view,
            (
                f"Something went wrong ({type(err).__name__}: {err}). The app is still "
                f"running: try again or change the settings.",
                "error",
            ),
        )


def counted(handler):
    """`handler` with its call counted in its client's share of the queue (app/client_share.py) from its start to its
    end, early refusals included (a call the client's share let in stops counting as waiting when it starts)."""
    if inspect.isgeneratorfunction(handler):

        @functools.wraps(handler)
        def streamed(*args, request: gr.Request | None = None, **kwargs):
            with client_share.running(request):
                yield from handler(*args, request=request, **kwargs)

        return streamed

    @functools.wraps(handler)
    def answered(*args, request: gr.Request | None = None, **kwargs):
        with client_share.running(request):
            return handler(*args, request=request, **kwargs)

    return answered


@counted
def run_handler(settings: RunSettings, view: View, request: gr.Request | None = None) -> Iterator[list]:
    """Run a comparison: one lane per method on the same prompt and seed, streamed round by round."""
    session = SESSIONS.get(request)
    if not session.lock.acquire(blocking=False):
        yield skip_all(session, (TAB_BUSY, "error"))
        return
    # Stop reaches the call from now on; the cap's clock starts with its live slot (_queue_wait): waiting in line is
    # not decoding, and loads and fits count.
    budget = session.call = CallBudget()
    try:

        def body():
            if session.comparison is not None:
                session.comparison.stop()
                session.comparison.close()
                session.pool_run(session.comparison)  # a paused Step run's rounds so far
            session.stepping = False
            spec = settings.spec(session.history)
            spec.check()
            session.pins.clear()
            # One line for every live run on the server, in arrival order; its work sizes the wait it causes.
            work = len(spec.methods) * int(spec.max_new_tokens)
            ticket = live_queue.LIVE.join(work, *client_share.request_client(request))
            try:
                yield from _queue_wait(session, budget, ticket)
                loading = skip_all(session, (f"Loading {spec.preset} and {len(spec.methods)} lane(s)…", "busy"))
                yield loading
                # A fit the app started at start-up is not waited for: the lane starts on the default budget.
                lines = compare.fit_budgets(spec, wait_for_fits=False, new_fits=state.CALL_FITS, cancel=budget)
                while (line := (yield from _waiting(budget, lambda: next(lines, None), loading))) is not None:
                    loading = skip_all(session, (line, "busy"))
                    yield loading
                comp = yield from _waiting(
                    budget,
                    lambda: compare.start(spec, cancel=budget, wait_for_fits=False, new_fits=state.CALL_FITS),
                    loading,
                    discard=Comparison.close,
                )
                session.comparison, session.loaded = comp, None
                yield from _stream(session, view, comp, "Running")
            finally:
                live_queue.LIVE.leave(ticket)

        yield from _guard(session, view, body)
    finally:
        session.call = None
        session.lock.release()
    SESSIONS.enforce_budget(keep=session)  # the finished run now counts in what every tab holds


@counted
def step_handler(settings: RunSettings, view: View, request: gr.Request | None = None) -> list:
    """Advance every lane by one round (starting a new comparison, or a loaded run's replay, if none is paused)."""
    session = SESSIONS.get(request)
    if not session.lock.acquire(blocking=False):
        return skip_all(session, (TAB_BUSY, "error"))
    ticket = None
    try:

        def body():
            nonlocal ticket
            comp = session.comparison
            paused = session.stepping and comp is not None and not comp.finished
            if not (comp.replay if paused else session.loaded is not None):  # a live round: it takes a live slot
                session.call = session.call or CallBudget()  # Stop reaches the wait, which has no clock
                ticket = _slot_blocking(session.call, compare.MAX_LANES, request)  # one round of each lane
            released, session.released = session.released, None
            if not (session.stepping and comp is not None and not comp.finished):
                session.pool_run(comp)  # the run on show ended (pooled once, whatever ended it)
                if session.loaded is not None:
                    comp = saved_runs.replay(session.loaded)
                    session.loaded = None
                else:
                    budget = session.call = CallBudget(state.CALL_LIMIT_S)  # Stop and the cap cover the start
                    comp = compare.start(
                        settings.spec(session.history), cancel=budget, wait_for_fits=False, new_fits=state.CALL_FITS
                    )
                    budget.seconds = None  # started: a paused Step's lanes wait for the next Step without a clock
                session.comparison, session.stepping = comp, True
                session.pins.clear()
            clock = isinstance(comp.cancel, CallBudget) and not comp.replay
            if clock:  # each Step's round (the first reads the prompt) is capped like a call; the pause is not
                comp.cancel.restart(state.CALL_LIMIT_S)
            try:
                comp.turn()
            finally:
                if clock:
                    comp.cancel.seconds = None
            if comp.finished:
                comp.close()
                session.stepping = False
                session.pool_run(comp)
                _remember_turn(session, comp)
                yield render(session, view, ("Step mode: every lane has finished. " + _final_status(comp)[0], "info"))
            else:
                rounds = max(len(lane.events) - 1 for lane in comp.lanes)
                what = "the prefill (the target reads the prompt)" if rounds == 0 else f"round {rounds}"
                note = (
                    f"The paused Step session was ended and its memory freed because {released}; this Step "
                    f"started over. "
                    if released
                    else ""
                )
                yield render(
                    session,
                    view,
                    (
                        f"{note}Step mode: {what} done in every lane. Step again for the next "
                        f"round, Run to start over, Stop to end.",
                        "info",
                    ),
                )

        return list(_guard(session, view, body))[-1]
    finally:
        if ticket is not None:
            live_queue.LIVE.leave(ticket)
        session.call = None
        session.lock.release()
        SESSIONS.enforce_budget(keep=session)  # a paused Step holds its lanes' caches


def stop_handler(view: View, request: gr.Request | None = None) -> list:
    """Cancel every lane of this tab at once (a running comparison stops before its next round)."""
    session = SESSIONS.get(request)
    call = session.call
    if call is not None and not call.is_set():  # a call still loading, fitting or preparing: it stops within a round
        call.set()
        return skip_all(session, ("Stopping…", "busy"))
    comp = session.comparison
    if comp is None or comp.finished:
        return skip_all(session, ("Nothing is running.", "info"))
    comp.stop()
    if session.lock.acquire(blocking=False):  # a paused Step session: finish its lanes here
        try:
            comp.drain()
            session.stepping = False
            session.pool_run(comp)
            _remember_turn(session, comp)
            return render(session, view, _final_status(comp))
        finally:
            session.lock.release()
    return skip_all(session, ("Stopping every lane…", "busy"))


@counted
def replay_handler(view: View, request: gr.Request | None = None) -> Iterator[list]:
    """Play back the loaded run (or the last one) round by round, without a model."""
    session = SESSIONS.get(request)
    if not session.lock.acquire(blocking=False):
        yield skip_all(session, ("This tab is already running: press Stop first.", "error"))
        return
    try:
        source = session.loaded or session.comparison
        if source is None or (not source.finished and source is session.comparison):
            nothing = session.freed or "Nothing to replay yet: Run a comparison or load a saved run."
            yield skip_all(session, (nothing, "error"))
            return
        session.loaded = source
        comp = saved_runs.replay(source)
        session.comparison, session.stepping = comp, False
        session.pins.clear()
        yield from _guard(session, view, lambda: _stream(session, view, comp, "Replaying"))
    finally:
        session.lock.release()
    SESSIONS.enforce_budget(keep=session)


def example_handler(prompt: str, preset: str, view: View, request: gr.Request | None = None) -> Iterator[list]:
    """A clicked example: its recorded run of the default lanes (recordings.recording_for: the one made on `preset`,
    else the default preset's) replays at once with its recorded timing, labelled as a recording with the hardware
    it was made on. No model work and no live slot: it never waits behind live runs. ▶ Run then runs the same prompt
    live; ↻ Replay plays the recording again."""
    session = SESSIONS.get(request)
    index = recordings.example_index(prompt)
    if index is None:
        yield skip_all(session, ("Press ▶ Run to run this prompt live.", "info"))
        return
    if not session.lock.acquire(blocking=False):
        yield skip_all(
            session,
            (
                "This tab is busy (a run waiting or going, a replay or a step): the example's "
                "prompt is in the box; press Stop, then click the example again to watch its "
                "recording.",
                "error",
            ),
        )
        return
    try:
        try:
            recorded = recordings.recording_for(index, preset)
        except PossError as err:  # a damaged bundled file: say so, the tab keeps what it shows
            yield skip_all(
                session, (f"The example's recording could not be read ({err}); press ▶ Run to run it live.", "error")
            )
            return
        if recorded is None:
            yield skip_all(session, ("No recording is bundled for this example: press ▶ Run to run it live.", "info"))
            return
        if session.comparison is not None and not session.comparison.finished:
            session.comparison.stop()  # a paused Step session ends (and is pooled) before the recording replaces it
            session.comparison.drain()
            session.pool_run(session.comparison)
        comp = saved_runs.replay(recorded)
        session.comparison, session.loaded, session.stepping = comp, recorded, False
        session.pins.clear()
        made = f"a recording of {recorded.spec.preset}, made on {recordings.hardware_line(recorded)}"
        yield from _guard(
            session,
            view,
            lambda: _stream(
                session,
                view,
                comp,
                f"Replaying {made}, at its recorded speed",
                paced=True,
                note=f"That was {made}: press ▶ Run to run this prompt live.",
            ),
        )
    finally:
        session.lock.release()


def class_reset_handler(key: str, view: View, request: gr.Request | None = None) -> list:
    """The class pool's reset: only with the key the app was started with (`--class-reset-key`); the key box is
    emptied either way."""
    session = SESSIONS.get(request)
    done, message = CLASS.reset(key)
    return [""] + render(session, view, (message, "info" if done else "error"))


def class_tick_handler(view: View, request: gr.Request | None = None) -> list:
    """The timer's redraw of the four charts while they show "everyone on this server": drawn again only when the
    class pool changed since this tab last drew it (else nothing is sent)."""
    session = SESSIONS.get(request, touch=False)  # a timer, not the tab acting: it never postpones reaping
    if not view.everyone or session.class_seen == (CLASS.version, view.conditional):
        return [gr.skip()] * len(CHART_NAMES)
    return chart_outputs(session, view)


def view_handler(view: View, request: gr.Request | None = None) -> list:
    """Redraw after a toggle (colour by position/specialist, rejected drafts, conditional/unconditional)."""
    session = SESSIONS.get(request, touch=False)  # reading only: it never postpones reaping what the tab holds
    return render(session, view)


def tree_handler(lane_index: int, round_index: float, request: gr.Request | None = None) -> list:
    """The tree of lane `lane_index` at a chosen round (the slider) and that round told in words; the last round
    re-follows the live one."""
    session = SESSIONS.get(request, touch=False)
    comp = session.comparison
    if comp is None or lane_index >= len(comp.lanes):
        return [gr.skip(), gr.skip()]
    lane = comp.lanes[lane_index]
    r = int(round_index or 0)
    if r >= len(lane.events) - 1:
        session.pins.pop(lane_index, None)
    else:
        session.pins[lane_index] = r
    return [lane_tree(lane, r), lane_explain(lane, r, float(comp.spec.temperature) > 0.0)]


def tree_for(lane_index: int):
    def handler(round_index: float, request: gr.Request = None) -> list:
        return tree_handler(lane_index, round_index, request)

    return handler


def round_pick_handler(lane_index: int, round_index: Any, request: gr.Request | None = None) -> list:
    """A clicked token's round: lane `lane_index`'s slider moves there, with its tree and account (slider, tree,
    account). Anything but a round the lane has leaves them as they are."""
    session = SESSIONS.get(request, touch=False)
    comp = session.comparison
    try:
        r = int(round_index)
    except (TypeError, ValueError):
        r = -1
    if comp is None or not 0 <= lane_index < len(comp.lanes) or not 0 <= r < len(comp.lanes[lane_index].events):
        return [gr.skip()] * 3
    return [round_slider(comp.lanes[lane_index], r)] + tree_handler(lane_index, r, request)


def round_pick_for(lane_index: int):
    """Lane `lane_index`'s token click (the tokens' `data-round`, sent by render.TOKEN_CLICK_JS)."""

    def handler(evt: gr.EventData, request: gr.Request = None) -> list:
        data = evt._data if isinstance(getattr(evt, "_data", None), dict) else {}
        return round_pick_handler(lane_index, data.get("round"), request)

    return handler


def forget_handler(view: View, request: gr.Request | None = None) -> list:
    """ "Forget my runs": empty this tab's pooled runs (every preset's) and redraw."""
    session = SESSIONS.get(request)
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
    SESSIONS.drop(request)


def save_handler(request: gr.Request | None = None) -> Any:
    """Write this tab's last run (all events plus settings) as JSONL and offer it for download. A run is written
    once (saving it again offers the same file) into Gradio's cache, whose sweep deletes it; the folder also keeps
    at most SAVED_RUNS_KEPT files (`prune_saved_runs`)."""
    session = SESSIONS.get(request, touch=False)
    comp = session.comparison
    if comp is None or not any(lane.events for lane in comp.lanes):
        raise gr.Error(session.freed or "Nothing to save yet: run a comparison first.")
    known = _SAVED.get(comp)
    if known is not None and known.is_file():
        return str(known)
    folder = saved_runs_dir()
    prune_saved_runs(folder)
    name = f"poss-run-{time.strftime('%Y%m%d-%H%M%S')}-{SESSIONS.key(request)[:8]}-{next(_SAVE_COUNT)}.jsonl"
    path = _SAVED[comp] = saved_runs.save_run(comp, folder / name)
    return str(path)


SAVED_RUNS_KEPT = 16  # saved-run files kept in saved_runs_dir(), the newest
SAVED_RUN_AGE_S = 600.0  # older ones are deleted at the next save (the cache sweep usually has by then)
_SAVED: "weakref.WeakKeyDictionary[Comparison, Path]" = weakref.WeakKeyDictionary()  # each run's file, written once
_SAVE_COUNT = itertools.count()


def saved_runs_dir() -> Path:
    """Where Save writes: a folder inside Gradio's cache ($GRADIO_TEMP_DIR, else TMPDIR/gradio), so Gradio serves the
    file where it is (no second copy) and its cache sweep deletes it (`--cache-minutes`)."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio") / "poss-runs"


def prune_saved_runs(folder: Path, keep: int | None = None, age_s: float | None = None) -> int:
    """Delete saved-run files older than `age_s` and all but the newest `keep` (SAVED_RUN_AGE_S, SAVED_RUNS_KEPT);
    returns how many went."""
    keep = SAVED_RUNS_KEPT if keep is None else keep
    age_s = SAVED_RUN_AGE_S if age_s is None else age_s
    try:
        files = sorted(
            (p for p in folder.glob("poss-run-*.jsonl") if p.is_file()), key=lambda p: p.stat().st_mtime, reverse=True
        )
    except OSError:
        return 0
    now, gone = time.time(), 0
    for i, path in enumerate(files):
        try:
            if i >= keep or now - path.stat().st_mtime > age_s:
                path.unlink()
                gone += 1
        except OSError:  # deleted meanwhile by another save: nothing to do
            pass
    return gone


def load_handler(file: Any, view: View, request: gr.Request | None = None) -> list:
    """Show a saved run as it ended; Replay plays it back, Step goes through it round by round.

    The file is checked in full before the session changes: a bad file leaves the tab as it was and the status line
    names the line and field that is wrong."""
    session = SESSIONS.get(request)
    if file is None:
        return skip_all(session, session.status)
    path = file if isinstance(file, str) else getattr(file, "name", str(file))
    if not session.lock.acquire(blocking=False):
        return skip_all(session, ("This tab is running: press Stop before loading a run.", "error"))
    before = (session.comparison, session.loaded, session.stepping, dict(session.pins))
    try:
        comp = saved_runs.load_run(path)
        if session.comparison is not None and not session.comparison.finished:
            session.comparison.stop()  # a paused Step session: end its lanes before the loaded run replaces them
            session.comparison.drain()
            session.pool_run(session.comparison)
        session.comparison, session.loaded, session.stepping = comp, comp, False
        session.pins.clear()
        prompt = str(comp.spec.messages()[-1].get("content", ""))
        return render(
            session,
            view,
            (
                f"Loaded a saved run ({comp.spec.preset}, prompt: {prompt[:60]!r}). Replay "
                f"plays it back, Step goes through it round by round; no model needed.",
                "info",
            ),
        )
    except Exception as err:  # noqa: BLE001 - whatever went wrong, the tab keeps what it showed before
        session.comparison, session.loaded, session.stepping = before[:3]
        session.pins.clear()
        session.pins.update(before[3])
        if not isinstance(err, PossError):
            traceback.print_exc(file=sys.stderr)
            err = f"could not show the saved run ({type(err).__name__}: {err})."
        return render(session, view, (str(err), "error"))
    finally:
        session.lock.release()
        SESSIONS.enforce_budget(keep=session)  # a loaded run counts in what every tab holds


def new_conversation_handler(request: gr.Request | None = None) -> str:
    session = SESSIONS.get(request)
    session.history = []
    return conversation_html(session.history)


def preset_handler(preset_name: str) -> list:
    """New preset: its methods, tree settings and draft notes."""
    try:
        preset = get_preset(preset_name)
    except PossError as err:
        return [gr.skip()] * (2 + len(state.PRESET_SETTINGS)) + [status_html(str(err), "error")]
    d = ui_defaults(preset)
    choices = method_choices(preset)
    keep = [m for m in DEFAULT_METHODS if m in dict((v, k) for k, v in choices)]
    return (
        [gr.CheckboxGroup(choices=choices, value=keep)]
        + [gr.update(value=d[n]) for n in state.PRESET_SETTINGS]
        + [draft_note(preset), gr.skip()]
    )
