"""One call's cap: the cancel flag and time cap that every piece of work a call starts (loads, fits, reference
decodes, the lanes' rounds) checks between rounds, so a public server's every call is bounded and stoppable."""

from __future__ import annotations

import threading
import time

from ..base.errors import CallStopped


class CallCap(threading.Event):
    """One call's cap: a cancel flag that Stop, a closed tab or a dropped client sets, and that sets itself once
    `seconds` have passed since the call began (its clock runs from creation: loads, fits, the oracle's reference
    decode and the lanes' rounds all count). Everything the call starts checks `is_set()` between rounds, so the
    call ends within one round of either. A `parent` Event (a cancelled API call) sets it too."""

    def __init__(self, seconds: float | None = None, parent: threading.Event | None = None) -> None:
        super().__init__()
        self.seconds = seconds
        self.parent = parent
        self.began = time.monotonic()
        self.timed_out = False  # set by the clock, not by a stop

    def restart(self, seconds: float | None) -> None:
        """Start the clock again, now, with `seconds` (a call that waited its turn in the app's queue of live runs
        begins its cap when it gets its slot: waiting is not decoding)."""
        self.began = time.monotonic()
        self.seconds = seconds

    def limit(self, seconds: float | None) -> None:
        """Give a cap without a time limit one (its clock still runs from the call's start)."""
        if self.seconds is None:
            self.seconds = seconds

    def is_set(self) -> bool:
        if not super().is_set():
            if self.seconds is not None and time.monotonic() - self.began > self.seconds:
                self.timed_out = True
                self.set()
            elif self.parent is not None and self.parent.is_set():
                self.set()
        return super().is_set()

    def check(self, doing: str) -> None:
        """Raise CallStopped, saying why and while doing what, once the call was stopped or ran out of time."""
        if self.is_set():
            raise self.stopped(doing)

    def stopped(self, doing: str) -> CallStopped:
        if self.timed_out:
            return CallStopped(
                f"Stopped at this server's limit of {self.seconds:g} s per call while {doing}: ask "
                f"for fewer new tokens, a smaller tree or a fixed tree budget."
            )
        return CallStopped(f"Stopped while {doing}: nothing was kept. Run again whenever you like.")


def as_cap(cancel: threading.Event | None) -> CallCap:
    """`cancel` as a call's cap: itself, or a cap without a time limit that follows it."""
    return cancel if isinstance(cancel, CallCap) else CallCap(parent=cancel)
