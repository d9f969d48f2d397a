"""What the server writes for people stays short and names nothing of the machine: a refused call is one line in the
log (no trace, no echo of the values it was sent), and a message shown to a user has the server's folders replaced
by neutral names (`neutral_paths`)."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import traceback as _traceback
from functools import lru_cache
from pathlib import Path
from types import TracebackType

LINE_CHARS = 300  # a trace line longer than this (a value echoed in an exception's message) is cut here


@lru_cache(maxsize=1)
def _server_paths() -> tuple[tuple[str, str], ...]:
    """(path, neutral name) for the folders a message could name, longest first so a folder inside another gets
    its own name."""
    from poss_core.base.paths import PROJECT_ROOT as ROOT
    from poss_core.models.default_model import cache_root

    named = {
        str(cache_root()): "the model cache",
        os.environ.get("GRADIO_TEMP_DIR") or str(Path(tempfile.gettempdir()) / "gradio"): "the upload folder",
        tempfile.gettempdir(): "a temporary folder",
        str(ROOT): "the app's folder",
        str(Path.home()): "the server's home folder",
    }
    pairs = {}
    for path, name in named.items():
        for form in {path, os.path.realpath(path)}:
            if len(form) > 1:  # never "/"
                pairs[form.rstrip(os.sep)] = name
    return tuple(sorted(pairs.items(), key=lambda p: len(p[0]), reverse=True))


def neutral_paths(text: str) -> str:
    """`text` with every server folder it names (the model cache, Gradio's upload folder, the temporary folder, the
    app's folder, the home folder) replaced by a neutral name: "could not load '<the model cache>/smollm2-...'"."""
    if not text or os.sep not in text:
        return text
    for path, name in _server_paths():
        text = text.replace(path, f"<{name}>")
    return text


def _frames(tb: TracebackType | None):
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


REFUSING = {"preprocess_data", "validate_inputs"}  # Gradio checking a call's inputs against its components


def _endpoint(tb: TracebackType | None) -> str:
    """The endpoint ("/run") whose call raised, or "a call" when the trace does not tell."""
    for f in _frames(tb):
        fn = f.f_locals.get("fn") if f.f_code.co_name in ("call_process_api", "process_api") else None
        name = getattr(fn, "api_name", None)
        if name:
            return f"/{name}"
    return "a call"


def _address(tb: TracebackType | None) -> str | None:
    """The client address of the request whose call raised (a frame's `gr_request`, `request` or `body.request`),
    None when the trace does not tell."""
    from gradio.route_utils import Request

    from app.server.client_share import request_client, scope_address

    for f in _frames(tb):
        for name in ("gr_request", "request", "body"):
            value = f.f_locals.get(name)
            try:
                if name == "body":
                    value = vars(value).get("request") if hasattr(value, "__dict__") else None
                if isinstance(value, Request):  # its attribute lookups are its request's, so ask it by name
                    return request_client(value)[1]
                scope = vars(value).get("scope") if hasattr(value, "__dict__") else None  # a Starlette request
                if isinstance(scope, dict):
                    return scope_address(scope)
            except Exception:  # noqa: BLE001 - a frame's odd local never costs the refusal its line
                continue
    return None


def refused_call(tb: TracebackType | None) -> str | None:
    """The endpoint ("/run") whose call Gradio refused while checking its inputs, "a call" when it cannot be told,
    or None when the exception happened elsewhere (a fault worth its trace)."""
    if not any(f.f_code.co_name in REFUSING and "gradio" in f.f_code.co_filename for f in _frames(tb)):
        return None
    return _endpoint(tb)


def _told_the_user(err: BaseException) -> bool:
    """A handler's own refusal (gr.Error): its message went to the user; the log needs no trace of it."""
    from gradio.exceptions import Error

    return isinstance(err, Error)


def print_exc(limit: int | None = None, file=None, chain: bool = True) -> None:
    """`traceback.print_exc` for Gradio's error paths: a call refused by Gradio's input checks, or by a handler's
    own gr.Error, is one line without its values; anything else keeps its trace, each line cut at LINE_CHARS."""
    out = file or sys.stderr
    kind, err, tb = sys.exc_info()
    if err is None:
        return
    where = refused_call(tb)
    if where is not None:
        REFUSED(f"{where}: its inputs did not pass the checks", _address(tb), out=file)
        return
    if _told_the_user(err):
        REFUSED(f"{_endpoint(tb)}: the user was told why", _address(tb), out=file)
        return
    for chunk in _traceback.format_exception(kind, err, tb, limit=limit, chain=chain):
        for line in chunk.rstrip("\n").split("\n"):
            print(line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " ...", file=out)
    out.flush()


class _QuietTraceback:
    """The `traceback` module as Gradio's error paths see it, with `print_exc` above."""

    print_exc = staticmethod(print_exc)

    def __getattr__(self, name: str):
        return getattr(_traceback, name)


def install() -> None:
    """Route Gradio's "print the trace of a failed call" through `print_exc` (its queue and its direct routes)."""
    import gradio.queueing
    import gradio.routes

    for module in (gradio.queueing, gradio.routes):
        if getattr(module, "traceback", None) is _traceback:
            module.traceback = _QuietTraceback()


class RefusalLog:
    """One log line per refusal: which limit, which address, never the values the call sent. The same limit and
    address refused again within `every_s` is counted, not written, and the count goes with its next line, so a
    flood of refusals cannot flood the log."""

    def __init__(self, every_s: float = 10.0, out=None, max_keys: int = 4096) -> None:
        self.every_s = every_s
        self.out = out
        self.max_keys = max_keys
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # (limit, address) -> (when written, held back)
        self._lock = threading.Lock()

    def __call__(self, limit: str, address: str | None, status: int | None = None, out=None) -> bool:
        """Log that a call from `address` was refused by `limit` (with its HTTP status) to `out` (else the log's
        own); False when it was only counted."""
        key, now = (limit, address or "?"), time.monotonic()
        with self._lock:
            when, held = self._last.get(key, (float("-inf"), 0))
            if now - when < self.every_s:
                self._last[key] = (when, held + 1)
                return False
            self._last[key] = (now, 0)
            if len(self._last) > self.max_keys:
                self._last = {k: v for k, v in self._last.items() if now - v[0] < self.every_s}
        more = f" (and {held} more like it)" if held else ""
        code = f" ({status})" if status else ""
        print(f"[poss] refused: {limit}{code}, from {key[1]}{more}", file=out or self.out or sys.stderr, flush=True)
        return True


REFUSED = RefusalLog()
