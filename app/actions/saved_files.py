"""Save and Load: a tab's run written once as JSONL into Gradio's cache (the folder kept small), and a saved run
checked in full before it replaces what the tab shows."""

from __future__ import annotations

import itertools
import math
import os
import sys
import tempfile
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

import gradio as gr

from app.server import client_share, disk_cap, file_owners, server_text
from app.sessions import state
from app.sessions.user_settings import View
from app.views.render import Frame, render, status_only
from poss_core.base.errors import PossError
from poss_core.decoding.config import MAX_PROMPT_CHARS
from poss_core.runtime import saved_runs
from poss_core.runtime.compare import Comparison


def save_handler(request: gr.Request | None = None) -> Any:
    """Write this tab's last run (all events plus settings) as JSONL and offer it for download. A run is written
    once (saving it again offers the same file) into Gradio's cache. The file belongs to this tab
    (`file_owners.OWNERS`): no other visitor's saves, loads or uploads can delete it while the tab lives and for
    `--saved-run-minutes` after; the tab keeps its newest few, and its address's saves count against its upload
    rate and its share of the disk."""
    session = state.SESSIONS.get(request, touch=False)
    comp = session.comparison
    if comp is None or not any(lane.events for lane in comp.lanes):
        raise gr.Error(session.freed or "Nothing to save yet: run a comparison first.")
    known = _SAVED.get(comp)
    if known is not None and known.is_file():
        return str(known)
    tab = state.SESSIONS.key(request)
    address = client_share.request_client(request)[1] or "?"
    data = saved_runs.run_text(comp).encode("utf-8")
    refused = _room_for(address, len(data))  # sized and admitted before a byte is on disk
    if refused:
        server_text.REFUSED(refused[0], address)
        raise gr.Error(refused[1])
    path = saved_runs_dir() / f"poss-run-{time.strftime('%Y%m%d-%H%M%S')}-{next(_SAVE_COUNT)}.jsonl"
    # Owned (so protected) before it is written: a sweep making room for another upload meanwhile never takes it.
    older = file_owners.OWNERS.saved(str(path), tab, address, len(data))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as err:
        _delete(str(path))
        raise gr.Error(f"could not write the saved run ({type(err).__name__}); try again.") from err
    for old in older:
        _delete(old)
    _SAVED[comp] = path
    return str(path)


def _room_for(address: str, size: int) -> tuple[str, str] | None:
    """Whether a saved run of `size` bytes may be written: its bytes count against its address's upload rate and
    must fit under the disk cap; if not, (the limit, what the user is told)."""
    wait = disk_cap.RATE.take(address, size)
    if wait > 0:
        return "save rate", f"Too many saves and uploads from your address: try again in {math.ceil(wait)} s."
    if not disk_cap.DISK.admit(size):
        return "disk cap", "The server's space for saved runs is full: try again in a few minutes."
    return None


def _delete(path: str) -> None:
    file_owners.OWNERS.forget(path)
    try:
        os.unlink(path)
    except OSError:  # gone already (a sweep)
        pass


_SAVED: "weakref.WeakKeyDictionary[Comparison, Path]" = weakref.WeakKeyDictionary()  # each run's file, written once
_SAVE_COUNT = itertools.count()


def saved_runs_dir() -> Path:
    """Where Save writes: a folder inside Gradio's cache ($GRADIO_TEMP_DIR, else TMPDIR/gradio), so Gradio serves the
    file where it is (no second copy)."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio") / "poss-runs"


def protect_saved_runs(demo: gr.Blocks) -> None:
    """Let Gradio's own cache sweep (`delete_cache`) skip the protected saved runs, as the disk sweep does: it keeps
    every file in a component's `keep_in_cache`, which it only adds to and iterates."""
    block = next(iter(demo.blocks.values()))
    block.keep_in_cache = file_owners.KeepInCache(block.keep_in_cache)


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
        frame = render(
            session,
            view,
            (
                f"Loaded a saved run ({comp.spec.preset}, prompt: {prompt[:60]!r}). Replay "
                f"plays it back, Step goes through it round by round, ▶ Run runs its prompt live; no model needed "
                f"until then.",
                "info",
            ),
        )
        return frame | {"prompt": prompt[:MAX_PROMPT_CHARS]}  # the box holds the run's prompt, for ▶ Run
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
        state.SESSIONS.enforce_total(keep=session)  # a loaded run counts in what every tab holds
