"""How a handler's call runs: it waits its turn in the live line showing its place, does slow work (a load, a fit,
a comparison's start) in a worker thread while it keeps yielding frames, turns errors into the status line, and is
counted in its client's share of the queue from start to end."""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

import gradio as gr

from app.server import client_share, limits, live_queue
from app.sessions.state import Session
from app.sessions.user_settings import View
from app.views.render import Frame, render, status_only
from poss_core.base.errors import CallStopped, PossError
from poss_core.runtime.compare import CallCap

WAIT_FRAME_S = 0.5  # while a call loads or fits in a worker thread, its handler yields this often (see waiting)
QUEUE_FRAME_S = 1.0  # while a live run waits for its slot, its status (place, estimate) is redrawn this often
QUEUE_POLL_S = 0.25  # how often a waiting run checks Stop (its slot wakes it at once)


def queue_wait(session: Session, call: CallCap, ticket: int) -> Iterator[Frame]:
    """Wait for this live run's slot (live_queue.LIVE), showing its place in line and the estimated wait every
    QUEUE_FRAME_S; Stop (the call's cap) or a gone client leaves the line. The call's time cap starts with its slot."""
    shown = 0.0
    while not live_queue.LIVE.wait(ticket, QUEUE_POLL_S):
        if call.is_set():
            raise CallStopped("Stopped while waiting in the queue: nothing ran. Run again whenever you like.")
        if time.monotonic() - shown >= QUEUE_FRAME_S:
            shown = time.monotonic()
            yield status_only(session, (live_queue.LIVE.status(ticket), "busy"))
    call.restart(limits.LIMITS.call_s)


def slot_blocking(call: CallCap, work: float, request: Any = None) -> int:
    """A live slot for a call that cannot stream its wait (a Step): blocks until it is this call's turn (Stop leaves
    the line); returns the ticket to leave with."""
    ticket = live_queue.LIVE.join(work, *client_share.request_client(request))
    while not live_queue.LIVE.wait(ticket, QUEUE_POLL_S):
        if call.is_set():
            live_queue.LIVE.leave(ticket)
            raise CallStopped("Stopped while waiting in the queue: nothing ran. Step again whenever you like.")
    return ticket


def waiting(call: CallCap, work, frame: Frame, discard=None) -> Iterator[Frame]:
    """Run `work()` (a load, a fit, a comparison's start) in a worker thread, yielding `frame` every WAIT_FRAME_S
    until it returns; its value is this generator's return value and its error is raised here. Gradio closes a
    handler's generator at a yield once its client has gone: the call's cap is then set, so the work stops within one
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
        call.set()
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


def guard(session: Session, view: View, fn) -> Iterator[Frame]:
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
    """`handler` with its call counted in its client's share of the queue (app/server/client_share.py) from its start
    to its end, early refusals included (a call the client's share let in stops counting as waiting when it starts)."""
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
