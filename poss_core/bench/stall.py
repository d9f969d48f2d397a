"""The benchmark's stall watch: a decode that makes no progress (no new round, no target forward in transformers'
`generate`) for `seconds` ends with a `StallError` naming the method and the question, instead of hanging.

Decoding runs in the benchmark's main thread (timed as a user's script runs it), so nothing there can notice its own
hang. A watcher thread reads the time of the last progress beat; past the bound it signals the main thread
(SIGUSR1), whose handler raises the StallError at the next Python instruction: that ends a decode stuck in Python
code or in a wait that signals interrupt (a queue, a lock, a sleep). A decode stuck inside one C call that never
returns to Python (a device synchronisation that never ends) cannot be interrupted: after `grace_s` more seconds the
watcher prints the same error and ends the process with exit code 4, so a script or CI job running the benchmark
still sees an error and not a silent hang.

Each beat is one `time.monotonic()` store: nothing the round timings could notice."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from ..base.errors import PossError, StallError

EXIT_STALLED = 4  # the process ended by the watcher: the stuck decode never returned to Python
_SIGNAL = signal.SIGUSR1 if hasattr(signal, "SIGUSR1") else None


class LaneError(PossError):
    """A method's decode failed (an exception inside its decoder or transformers' `generate`): the message names
    the method and the question, then the original error."""


def lane_failed(lane: str, where: str, err: BaseException) -> LaneError:
    """The error a failed decode becomes: which method, on which question, and what went wrong."""
    first = str(err).splitlines()[0] if str(err) else ""
    return LaneError(f"{lane} failed while decoding {where}: {type(err).__name__}: {first}")


class StallWatch:
    """Watches decodes for progress. Use as a context manager around the runs; wrap each decode in `watching(what)`
    and call `beat()` at every round. `seconds` None or 0 turns the watch off (beats cost the same)."""

    def __init__(
        self,
        seconds: float | None,
        grace_s: float = 30.0,
        hard_exit: Callable[[int], object] = os._exit,
        out: TextIO | None = None,
    ) -> None:
        self.seconds = float(seconds) if seconds else None
        self.grace_s = grace_s
        self.hard_exit = hard_exit
        self.out = out
        self.doing = ""
        self.message = ""
        self._last = time.monotonic()
        self._active = False
        self._fired = False
        self._raised = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous_handler = None
        self._main_ident: int | None = None

    def beat(self) -> None:
        """Progress: a round was made (or transformers' streamer was handed a token)."""
        self._last = time.monotonic()

    @contextmanager
    def watching(self, doing: str) -> Iterator[None]:
        """One decode, described for the error (method, question, turn, run)."""
        self.doing, self._fired, self._raised = doing, False, False
        self.beat()
        self._active = True
        try:
            yield
        finally:
            self._active = False

    def __enter__(self) -> StallWatch:
        if self.seconds is None:
            return self
        if _SIGNAL is not None and threading.current_thread() is threading.main_thread():
            self._main_ident = threading.get_ident()
            self._previous_handler = signal.signal(_SIGNAL, self._on_signal)
        self._done.clear()
        self._thread = threading.Thread(target=self._watch, name="bench-stall-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._main_ident is not None:
            signal.signal(_SIGNAL, self._previous_handler)
            self._main_ident = None

    def _on_signal(self, signum, frame) -> None:
        # Raised in the main thread, inside the stuck decode: it unwinds like any error of that decode.
        if self._fired and self._active and not self._raised:
            self._raised = True
            raise StallError(self.message)

    def _watch(self) -> None:
        tick = max(0.01, min(1.0, self.seconds / 4))
        while not self._done.wait(tick):
            idle = time.monotonic() - self._last
            if not self._active or self._fired or idle < self.seconds:
                continue
            self._fired = True
            self.message = (
                f"{self.doing} made no progress for {idle:.3g} s (the bound, --stall-seconds, is {self.seconds:g} "
                f"s): no round and no target forward. Its device may be stuck or far too slow; raise the bound only "
                f"if one forward of this model really takes that long."
            )
            if self._main_ident is not None:
                signal.pthread_kill(self._main_ident, _SIGNAL)
            ended = time.monotonic() + self.grace_s
            while self._active and self._fired and time.monotonic() < ended and not self._done.is_set():
                time.sleep(min(tick, 0.05))
            if self._active and self._fired and not self._done.is_set():
                out = self.out or sys.stderr
                print(
                    f"error: {self.message} It did not return to Python within {self.grace_s:g} s to be stopped, so "
                    f"the process ends here (exit code {EXIT_STALLED}).",
                    file=out,
                    flush=True,
                )
                self.hard_exit(EXIT_STALLED)
                return
