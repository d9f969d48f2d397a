"""Which tabs are open and who reads their events: the queue share's view of Gradio's connections.

A page (a browser tab, or a Gradio client) holds its session's heartbeat stream (`GET .../heartbeat/HASH`) while it
is open, and reads its events' replies on its session's `/queue/data` stream. `TabWatch` counts both as they pass
the queue share's middleware (client_share.QueueShareMiddleware), so that:

- an event of the page is taken only from a session whose page is open (a session hash a client merely invents has
  no heartbeat), and one address holds at most `pages_per_address` open pages;
- each admitted event carries its share's ticket until its reply is read (the `process_completed` message passing
  on the stream) or its session is dropped;
- an event whose reply nobody reads within `read_grace_s` (no stream open for its session since it joined, and no
  page open for it) is dropped with its whole session: Gradio stops or unqueues its events and lets go of its
  message store and per-session state (gradio_queue.drop_session), so an unread reply neither runs on nor pins
  memory."""

from __future__ import annotations

import asyncio
import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.server import gradio_queue
from app.server.limits import DEFAULTS

READ_GRACE_S = 8.0  # a client opens its stream within milliseconds of a join; a loaded machine may take seconds
PAGE_WAIT_S = 3.0  # a join may come a moment before its page's heartbeat (a Gradio client starts both at once)
WATCH_EVERY_S = 1.0
COMPLETED = re.compile(rb'"msg":\s*"process_completed",\s*"event_id":\s*"([^"]+)"')


@dataclass
class Held:
    """An admitted event: its share's ticket, its session and when it joined (its event id once Gradio answers)."""

    ticket: int
    session: str
    joined: float
    event_id: str | None = None


@dataclass
class TabWatch:
    """Open pages and streams per session, and the admitted events not yet read (see the module)."""

    release: Callable[[int], None]  # gives a ticket back to the share
    read_grace_s: float = READ_GRACE_S
    pages_per_address: int = DEFAULTS.pages_per_address
    on_drop: list[Callable[[str], None]] = field(default_factory=list)  # told each dropped session
    pages: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # session -> open heartbeats
    page_addresses: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # address -> open heartbeats
    streams: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # session -> open /queue/data
    last_read: dict[str, float] = field(default_factory=dict)  # session -> when a stream last opened or closed
    held: dict[int, Held] = field(default_factory=dict)  # ticket -> event
    _app: Any = None
    _task: asyncio.Task | None = None

    def page_opened(self, session: str, address: str) -> bool:
        """A heartbeat opens: False (not counted) when the address already has `pages_per_address` open."""
        if self.pages_per_address and self.page_addresses[address] >= self.pages_per_address:
            return False
        self.pages[session] += 1
        self.page_addresses[address] += 1
        return True

    def page_closed(self, session: str, address: str) -> None:
        _down(self.pages, session)
        _down(self.page_addresses, address)

    async def page_open(self, session: str, wait_s: float = PAGE_WAIT_S) -> bool:
        """Whether `session`'s page is open, waiting up to `wait_s` for its heartbeat to arrive."""
        deadline = time.monotonic() + wait_s
        while not self.pages.get(session):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def admitted(self, ticket: int, session: str) -> Held:
        held = self.held[ticket] = Held(ticket, session, time.monotonic())
        return held

    def answered(self, held: Held, accepted: bool, event_id: str | None) -> None:
        """Gradio's answer to the join: refused (the ticket goes back), or accepted with its event id."""
        if not accepted:
            self.give_back(held.ticket)
        else:
            held.event_id = event_id

    def give_back(self, ticket: int) -> None:
        if self.held.pop(ticket, None) is not None:
            self.release(ticket)

    def stream_opened(self, session: str) -> None:
        self.streams[session] += 1
        self.last_read[session] = time.monotonic()

    def stream_closed(self, session: str) -> None:
        """A stream ends: its session's events were read, or Gradio cleaned them up (the client left)."""
        _down(self.streams, session)
        self.last_read[session] = time.monotonic()
        if not self.streams.get(session):
            for held in [h for h in self.held.values() if h.session == session and h.event_id]:
                self.give_back(held.ticket)

    def read(self, chunk: bytes) -> None:
        """A stream chunk went out: each completed event in it gives its ticket back."""
        if b"process_completed" not in chunk:
            return
        done = {m.decode("latin-1") for m in COMPLETED.findall(chunk)}
        for held in [h for h in self.held.values() if h.event_id in done]:
            self.give_back(held.ticket)

    def unread(self, now: float) -> set[str]:
        """Sessions with an event nobody has read for `read_grace_s`: no stream open since it joined, and no page
        open either (an open page's events are read by it; a busy browser may open its stream late)."""
        return {
            h.session
            for h in self.held.values()
            if not self.streams.get(h.session)
            and not self.pages.get(h.session)
            and now - max(h.joined, self.last_read.get(h.session, 0.0)) > self.read_grace_s
        }

    async def drop_unread(self, now: float | None = None) -> list[str]:
        """Drop every unread session (its events, replies and state) and give its tickets back."""
        dropped = sorted(self.unread(time.monotonic() if now is None else now))
        for session in dropped:
            if self._app is not None:
                await gradio_queue.drop_session(self._app, session)
            for held in [h for h in self.held.values() if h.session == session]:
                self.give_back(held.ticket)
            self.last_read.pop(session, None)
            for hook in self.on_drop:
                hook(session)
        return dropped

    def watch(self, app: Any) -> None:
        """Start the loop that drops unread sessions (once, on the server's event loop)."""
        self._app = app if self._app is None else self._app
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            try:
                await self.drop_unread()
            except Exception:  # noqa: BLE001 - the watch must outlive one bad session
                pass


def _down(counts: dict[str, int], key: str) -> None:
    counts[key] -= 1
    if counts[key] <= 0:
        counts.pop(key, None)
