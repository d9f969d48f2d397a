"""The handlers that decode or play rounds: Run, Step, Stop, Replay and a clicked example. Plain functions of the
settings (one `RunSettings`), the view (one `View`) and the request, testable directly; each returns (or streams)
every output through `render.render`. Redrawing handlers are in app/actions/view_handlers.py, Save and Load in
app/actions/saved_files.py, how a call waits and fails in app/actions/calls.py."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import gradio as gr

from app.actions import calls
from app.server import client_share, limits, live_queue
from app.sessions import machine, recordings, state
from app.sessions.state import Session
from app.sessions.user_settings import RunSettings, View
from app.views.render import Frame, render, status_only
from poss_core.base.errors import PossError
from poss_core.rounds import metrics
from poss_core.runtime import compare, methods, saved_runs
from poss_core.runtime.compare import CallCap, Comparison
from poss_core.runtime.run_spec import MAX_LANES

UPDATE_EVERY_S = 0.35  # the most often a running comparison repaints (lanes run flat out in between)
CHARTS_EVERY_S = 1.5  # the charts repaint less often than the lanes
MAX_RENDER_SHARE = 0.25  # repaint slower when drawing would take more than this share of the time
# Repaint slower as a frame grows: each frame redraws every lane's whole token view in the browser (on a teacher's
# laptop, the machine the server decodes on), and a long run's three lanes make views of a megabyte or more.
FRAME_BYTES_PER_S = 1_000_000
REPLAY_NAP_S = 0.25  # a replay waiting for its clock sleeps at most this long between looks at Stop
REPLAY_SPEED = 1.0  # a replay's clock against the recording's: 1 plays it at the speed it was recorded
STOP_WAIT_S = 5.0  # Stop waits this long for the call it stopped to end (a round, a load's step) before it answers

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
            f"Stopped at this server's limit of {limits.LIMITS.call_s:g} s per call: every lane ended cleanly. "
            f"Ask for fewer new tokens or a smaller tree.",
            "info",
        )
    stopped_before = any(lane.stop_reason == "cancelled" for lane in comp.lanes)
    if comp.cancelled or (stopped_before and not comp.replay):
        return "Stopped: every lane was cancelled cleanly. Run again whenever you like.", "info"
    what = REPLAY_DONE if comp.replay else DONE
    if comp.replay and stopped_before:
        note = ("The run it plays was stopped before its end. " + note).strip()
    tokens = ", ".join(f"{lane.short} {metrics.total_new_tokens(lane.events)}" for lane in comp.lanes)
    return (
        f"{what}: new tokens {tokens}. Hover tokens for details; scrub the trees with the round sliders."
        f"{' ' + note if note else ''}",
        "info",
    )


def frame_bytes(frame: Frame) -> int:
    """About what a frame weighs on the wire: its text outputs (the token views, headers, statuses)."""
    return sum(len(v) for v in frame.values() if isinstance(v, str))


def _stream(
    session: Session, view: View, comp: Comparison, label: str, light: bool = False, note: str = ""
) -> Iterator[Frame]:
    """Race the lanes in time until done (`Comparison.race`), repainting at most every UPDATE_EVERY_S (and after the
    last round). A replay plays on the same clock at its recorded speed: at t seconds after it began, each lane
    shows the rounds it had decoded by t seconds of its own recorded time. `light` (a class's examples, many at
    once): trees only every CHARTS_EVERY_S (the first frame none) and the charts once, at the end; `note` ends the
    final status.

    Drawing happens between rounds, outside every lane's timing; on a slow CPU it backs off so that it takes at
    most MAX_RENDER_SHARE of the time, and a large frame (a long answer) comes at most FRAME_BYTES_PER_S."""
    last, last_charts, gap = 0.0, time.monotonic() if light else 0.0, UPDATE_EVERY_S
    began = time.monotonic()
    if isinstance(comp.cancel, CallCap):
        comp.cancel.limit(limits.LIMITS.call_s)  # the per-call cap (a live run's clock began with its call)
    try:
        while True:
            if comp.replay and comp.cancelled:  # replayed lanes do not watch the flag themselves
                comp.drain()
                break
            until = _replay_clock_ms(began) if comp.replay else math.inf
            if not comp.race(until):
                break
            if comp.replay:
                _nap_until_due(comp, began)
            now = time.monotonic()
            if now - last >= gap:
                heavy = now - last_charts >= CHARTS_EVERY_S
                rounds = max(len(lane.events) for lane in comp.lanes)
                frame = render(
                    session,
                    view,
                    (f"{label}: round {rounds}… (Stop cancels every lane)", "busy"),
                    running=True,
                    with_charts=heavy and not light,
                    with_trees=heavy or not light,
                )
                last = time.monotonic()
                gap = max(UPDATE_EVERY_S, (last - now) / MAX_RENDER_SHARE, frame_bytes(frame) / FRAME_BYTES_PER_S)
                if heavy:
                    last_charts = last
                yield frame
    finally:
        comp.close()
        session.pool_run(comp)  # also when the browser went away mid-run: its rounds so far count
    _remember_turn(session, comp)
    yield render(session, view, _final_status(comp, note))


def _nap_until_due(comp: Comparison, began: float) -> None:
    """A replay with nothing to decode or show before its clock reaches the next round's time sleeps until then
    (at most REPLAY_NAP_S, so that Stop is seen)."""
    due = comp.due_ms()
    if due is None:
        return
    wait = (due - _replay_clock_ms(began)) / 1000.0 / REPLAY_SPEED
    if wait > 0:
        time.sleep(min(wait, REPLAY_NAP_S))


def _replay_clock_ms(began: float) -> float:
    """A replay's clock: the recorded milliseconds it has reached (REPLAY_SPEED times the time since it began)."""
    return (time.monotonic() - began) * 1000.0 * REPLAY_SPEED


@calls.counted
def run_handler(settings: RunSettings, view: View, request: gr.Request | None = None) -> Iterator[Frame]:
    """Run a comparison: one lane per method on the same prompt and seed, streamed round by round."""
    session = state.SESSIONS.get(request)
    if not state.hold(session):
        yield status_only(session, (TAB_BUSY, "error"))
        return
    # Stop reaches the call from now on; the cap's clock starts with its live slot (calls.queue_wait): waiting in
    # line is not decoding, and loads and fits count.
    call = session.call = CallCap()
    try:

        def body():
            if session.comparison is not None:
                session.comparison.stop()
                session.comparison.close()
                session.pool_run(session.comparison)  # a paused Step run's rounds so far
            session.stepping = False
            run = settings.resolved(session.history)
            spec = run.spec
            session.pins.clear()
            # One line for every live run on the server, in arrival order; its work sizes the wait it causes.
            work = len(spec.methods) * int(spec.max_new_tokens)
            ticket = live_queue.LIVE.join(work, *client_share.request_client(request))
            try:
                yield from calls.queue_wait(session, call, ticket)
                loading = status_only(session, (f"Loading {spec.preset} and {len(spec.methods)} lane(s)…", "busy"))
                yield loading
                # A fit the app started at start-up is not waited for: the lane starts on the default budget.
                lines = compare.fit_budgets(run, wait_for_fits=False, new_fits=limits.LIMITS.call_fits, cancel=call)
                while (line := (yield from calls.waiting(call, lambda: next(lines, None), loading))) is not None:
                    loading = status_only(session, (line, "busy"))
                    yield loading
                comp = yield from calls.waiting(
                    call,
                    lambda: machine.mark_live(
                        compare.start(run, cancel=call, wait_for_fits=False, new_fits=limits.LIMITS.call_fits)
                    ),
                    loading,
                    discard=Comparison.close,
                )
                session.comparison, session.loaded = comp, None
                yield from _stream(session, view, comp, "Running")
            finally:
                live_queue.LIVE.leave(ticket)

        yield from calls.guard(session, view, body)
    finally:
        session.call = None
        session.lock.release()
    state.SESSIONS.enforce_total(keep=session)  # the finished run now counts in what every tab holds


@calls.counted
def step_handler(settings: RunSettings, view: View, request: gr.Request | None = None) -> Frame:
    """Advance every lane by one round (starting a new comparison, or a loaded run's replay, if none is paused)."""
    session = state.SESSIONS.get(request)
    if not state.hold(session):
        return status_only(session, (TAB_BUSY, "error"))
    ticket = None
    try:

        def body():
            nonlocal ticket
            comp = session.comparison
            paused = session.stepping and comp is not None and not comp.finished
            if not (comp.replay if paused else session.loaded is not None):  # a live round: it takes a live slot
                session.call = session.call or CallCap()  # Stop reaches the wait, which has no clock
                ticket = calls.slot_blocking(session.call, MAX_LANES, request)  # one round of each lane
            released, session.released = session.released, None
            if not (session.stepping and comp is not None and not comp.finished):
                session.pool_run(comp)  # the run on show ended (pooled once, whatever ended it)
                if session.loaded is not None:
                    comp = saved_runs.replay(session.loaded)
                    session.loaded = None
                else:
                    call = session.call = CallCap(limits.LIMITS.call_s)  # Stop and the cap cover the start
                    comp = machine.mark_live(
                        compare.start(
                            settings.resolved(session.history),
                            cancel=call,
                            wait_for_fits=False,
                            new_fits=limits.LIMITS.call_fits,
                        )
                    )
                    call.seconds = None  # started: a paused Step's lanes wait for the next Step without a clock
                session.comparison, session.stepping = comp, True
                session.pins.clear()
            clock = isinstance(comp.cancel, CallCap) and not comp.replay
            if clock:  # each Step's round (the first reads the prompt) is capped like a call; the pause is not
                comp.cancel.restart(limits.LIMITS.call_s)
            try:
                comp.step_round()
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

        return list(calls.guard(session, view, body))[-1]
    finally:
        if ticket is not None:
            live_queue.LIVE.leave(ticket)
        session.call = None
        session.lock.release()
        state.SESSIONS.enforce_total(keep=session)  # a paused Step holds its lanes' caches


def stop_handler(view: View, request: gr.Request | None = None) -> Frame:
    """Cancel every lane of this tab at once. A call loading, fitting, waiting or running ends within a round; Stop
    answers once it has (up to STOP_WAIT_S) with the status that call ended on, so its answer and the call's last frame
    say the same whichever reaches the page last. A paused Step session is ended here."""
    session = state.SESSIONS.get(request)
    call = session.call
    comp = session.comparison
    if call is not None and not call.is_set():
        call.set()
    elif comp is None or comp.finished:
        return status_only(session, ("Nothing is running.", "info"))
    else:
        comp.stop()
    if not state.hold(session, STOP_WAIT_S):  # still ending its round: its own last frame says when it has
        return status_only(session, ("Stopping every lane…", "busy"), remember=False)
    try:
        comp = session.comparison
        if comp is None or comp.finished:  # the call ended and said so
            return status_only(session, session.status)
        _end_steps(session, comp)  # a paused Step session: finish its lanes here
        return render(session, view, _final_status(comp))
    finally:
        session.lock.release()


def _end_steps(session: Session, comp: Comparison) -> None:
    """End a paused Step session (every lane cancelled where it stands), pooled and remembered like a stopped run."""
    comp.stop()
    comp.drain()
    session.stepping = False
    session.pool_run(comp)
    _remember_turn(session, comp)


@calls.counted
def replay_handler(view: View, request: gr.Request | None = None) -> Iterator[Frame]:
    """Play back the loaded run (or the last one) round by round, without a model."""
    session = state.SESSIONS.get(request)
    if not state.hold(session):
        yield status_only(session, ("This tab is already running: press Stop first.", "error"))
        return
    try:
        source = session.loaded or session.comparison
        if source is not None and source is session.comparison and not source.finished and session.stepping:
            _end_steps(session, source)  # a paused Step session ends here, and its rounds so far replay
        if source is None or not source.finished:
            nothing = session.freed or "Nothing to replay yet: Run a comparison or load a saved run."
            yield status_only(session, (nothing, "error"))
            return
        session.loaded = source
        comp = saved_runs.replay(source)
        session.comparison, session.stepping = comp, False
        session.pins.clear()
        yield from calls.guard(session, view, lambda: _stream(session, view, comp, "Replaying"))
    finally:
        session.lock.release()
    state.SESSIONS.enforce_total(keep=session)


def example_handler(prompt: str, preset: str, view: View, request: gr.Request | None = None) -> Iterator[Frame]:
    """A clicked example: its recorded run of the default lanes (recordings.recording_for: the one made on `preset`,
    else the default preset's) replays at once with its recorded timing, labelled as a recording with the hardware
    it was made on. No model work and no live slot: it never waits behind live runs. ▶ Run then runs the same prompt
    live; ↻ Replay plays the recording again."""
    session = state.SESSIONS.get(request)
    index = recordings.example_index(prompt)
    if index is None:
        yield status_only(session, ("Press ▶ Run to run this prompt live.", "info"))
        return
    if not state.hold(session):
        yield status_only(
            session,
            (
                "This tab is busy (a run waiting or going, a replay or a step): its prompt stays in the "
                "box; press Stop, then click the example again to watch its "
                "recording.",
                "error",
            ),
        )
        return
    try:
        try:
            recorded = recordings.recording_for(index, preset)
        except PossError as err:  # a damaged bundled file: say so, the tab keeps what it shows
            yield status_only(
                session, (f"The example's recording could not be read ({err}); press ▶ Run to run it live.", "error")
            )
            return
        if recorded is None:
            yield status_only(
                session, ("No recording is bundled for this example: press ▶ Run to run it live.", "info")
            )
            return
        if session.comparison is not None and not session.comparison.finished:
            session.comparison.stop()  # a paused Step session ends (and is pooled) before the recording replaces it
            session.comparison.drain()
            session.pool_run(session.comparison)
        comp = saved_runs.replay(recorded)
        session.comparison, session.loaded, session.stepping = comp, recorded, False
        session.pins.clear()
        made = f"a recording of {recorded.spec.preset}, made on {recordings.hardware_line(recorded)}"
        yield from calls.guard(
            session,
            view,
            lambda: _stream(
                session,
                view,
                comp,
                f"Replaying {made}, at its recorded speed",
                light=True,
                note=f"That was {made}: press ▶ Run to run this prompt live.",
            ),
        )
    finally:
        session.lock.release()
