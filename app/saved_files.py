"""Save and Load: a tab's run written once as JSONL into Gradio's cache (the folder kept small), and a saved run
checked in full before it replaces what the tab shows."""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

import gradio as gr

from poss_core import saved_runs
from poss_core.compare import Comparison
from poss_core.errors import PossError

from . import state
from .render import Frame, render, status_only
from .user_settings import View


def save_handler(request: gr.Request | None = None) -> Any:
    """Write this tab's last run (all events plus settings) as JSONL and offer it for download. A run is written
    once (saving it again offers the same file) into Gradio's cache, whose sweep deletes it; the folder also keeps
    at most SAVED_RUNS_KEPT files (`prune_saved_runs`)."""
    session = state.SESSIONS.get(request, touch=False)
    comp = session.comparison
    if comp is None or not any(lane.events for lane in comp.lanes):
        raise gr.Error(session.freed or "Nothing to save yet: run a comparison first.")
    known = _SAVED.get(comp)
    if known is not None and known.is_file():
        return str(known)
    folder = saved_runs_dir()
    prune_saved_runs(folder)
    name = f"poss-run-{time.strftime('%Y%m%d-%H%M%S')}-{state.SESSIONS.key(request)[:8]}-{next(_SAVE_COUNT)}.jsonl"
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


def load_handler(file: Any, view: View, request: gr.Request | None = None) -> Frame:
    """Show a saved run as it ended; Replay plays it back, Step goes through it round by round.

    The file is checked in full before the session changes: a bad file leaves the tab as it was and the status line
    names the line and field that is wrong."""
    session = state.SESSIONS.get(request)
    if file is None:
        return status_only(session, session.status)
    path = file if isinstance(file, str) else getattr(file, "name", str(file))
    if not state.hold(session):
        return status_only(session, ("This tab is running: press Stop before loading a run.", "error"))
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
        state.SESSIONS.enforce_budget(keep=session)  # a loaded run counts in what every tab holds
