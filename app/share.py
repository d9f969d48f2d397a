"""Each client's share of the queue: at most so many decoding calls (Run, Step, Replay, /compare) waiting or running
per browser tab or API client (its Gradio session hash) and per address. A call past its client's share
is refused when it asks to join the queue, with a message that says why, so one client cannot hold the queue's slots
or the decoding workers that every other client waits for.

Counting: `QueueShareMiddleware` (an ASGI middleware on the app, `launch(app_kwargs={"middleware": ...})`) reads each
`/queue/join` request of a counted event and adds it as pending; the handler moves it to running when it starts
(`ClientShare.running`) and lets it go when it ends, however it ends. A pending call that never starts (its client
left, or cancelled it, while it waited) stops counting after `pending_ttl_s`.

Live runs (Run, Step, /compare) then take turns in `LiveQueue`: `slots` of them decode at once, the rest wait in a
line where addresses take turns, then sessions within an address, and a waiting run's status shows its place in
line and an estimate of the wait (the expected seconds of the runs ahead, from how long the recent live runs held
their slot and the per-call cap). Replays and the class charts never enter it."""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import json
import os
import threading
import time
from collections import OrderedDict, defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from poss_core.errors import PossError

PER_CLIENT = 2  # calls waiting or running per session (`python app.py --max-calls-per-client`)
# Per client address (`--max-calls-per-address`; 0: no limit). A class behind one NAT shares one address: thirty
# students with a call each fit, and the line's turns keep one address's calls from delaying other addresses.
PER_ADDRESS = 40


def client_address(host: str | None, forwarded_for: str | None) -> str:
    """The client's address: the peer's, or the first X-Forwarded-For hop when the peer is a private or loopback
    address (a proxy in front of the app, as on a Space); a header from a public peer is not trusted."""
    host = host or "?"
    if forwarded_for:
        try:
            private = ipaddress.ip_address(host).is_private
        except ValueError:
            private = False
        if private:
            return forwarded_for.split(",")[0].strip() or host
    return host


class ClientShare:
    """Pending and running calls per client key ("session:HASH", "address:IP"), with a limit per kind."""

    def __init__(
        self, per_client: int = PER_CLIENT, per_address: int = PER_ADDRESS, pending_ttl_s: float = 120.0
    ) -> None:
        self.per_client = per_client
        self.per_address = per_address
        self.pending_ttl_s = pending_ttl_s
        self._lock = threading.Lock()
        self._pending: dict[str, list[float]] = defaultdict(list)
        self._running: dict[str, int] = defaultdict(int)

    @staticmethod
    def keys(session: str | None, address: str | None) -> list[str]:
        return [f"session:{session or '?'}", f"address:{address or '?'}"]

    def _limit(self, key: str) -> int:
        return self.per_client if key.startswith("session:") else self.per_address

    def _held(self, key: str, now: float) -> int:
        pending = [t for t in self._pending.get(key, []) if now - t < self.pending_ttl_s]
        if pending:
            self._pending[key] = pending
        else:
            self._pending.pop(key, None)
        return len(pending) + self._running.get(key, 0)

    def join(self, session: str | None, address: str | None) -> str | None:
        """Count a call asking to join the queue; returns why it is refused (nothing is counted then), else None."""
        now = time.monotonic()
        with self._lock:
            for key in self.keys(session, address):
                limit = self._limit(key)
                if limit > 0 and self._held(key, now) >= limit:
                    who = "this tab (or API client)" if key.startswith("session:") else "your address"
                    return (
                        f"{who} already has {limit} call{'s' if limit != 1 else ''} waiting or running, the most "
                        f"this server gives one client: wait for one to finish (or Stop it), then try again."
                    )
            for key in self.keys(session, address):
                self._pending[key].append(now)
        return None

    @contextmanager
    def running(self, session: str | None, address: str | None) -> Iterator[None]:
        """A handler's call from its start to its end: no longer pending, counted as running until it ends."""
        keys = self.keys(session, address)
        with self._lock:
            for key in keys:
                if self._pending.get(key):
                    self._pending[key].pop(0)
                self._running[key] += 1
        try:
            yield
        finally:
            with self._lock:
                for key in keys:
                    self._running[key] -= 1
                    if self._running[key] <= 0:
                        del self._running[key]

    def held(self, session: str | None, address: str | None) -> tuple[int, int]:
        """(calls held by the session, by the address): for tests and the load check."""
        now = time.monotonic()
        with self._lock:
            return tuple(self._held(k, now) for k in self.keys(session, address))  # type: ignore[return-value]


SHARE = ClientShare()


def auto_slots(cores: int | None, threads: int) -> int:
    """Live runs decoding at once by default: half the cores over each run's torch threads, at least one (a 2-vCPU
    Space: one run on one core, the other core left to the web server, the drawing and the replays)."""
    return max(1, (cores or os.cpu_count() or 2) // 2 // max(1, threads))


# A slot's hold per unit of work (lanes x new tokens asked for) before any live run has ended: a 64-token three-lane
# run of the default model on one thread of a 2-vCPU machine takes about 15 s, the first one after start-up longer.
TYPICAL_S_PER_UNIT = 0.1


class QueueFull(PossError):
    """The queue of live runs is full: the server says so instead of taking more than it can serve."""


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class LiveQueue:
    """Live runs in a fair line: `slots` decode at once, up to `max_waiting` wait. The next to start is the oldest
    call of the least recently served session of the least recently served address (an address or session not
    served yet comes first), so addresses take turns, then sessions within an address: one address's flood waits
    behind every other address's next call, and one tab's behind its neighbours'. A ticket's place is 0 while it
    decodes and k for the k-th in that order.

    Each ticket carries its work (lanes times the new tokens it asked for). The wait is estimated by playing the line
    forward, each run holding its slot for its expected seconds: its work times the seconds per unit of work that
    the last few runs took (`typical_s_per_unit` before any run ended), never more than `cap_s` (a call is stopped
    at the per-call cap)."""

    def __init__(
        self,
        slots: int = 1,
        max_waiting: int = 64,
        typical_s_per_unit: float = TYPICAL_S_PER_UNIT,
        history: int = 8,
        cap_s: float | None = None,
    ) -> None:
        self.slots = slots
        self.max_waiting = max_waiting
        self.typical_s_per_unit = typical_s_per_unit
        self.cap_s = cap_s  # the per-call cap (`--max-call-seconds`): the longest a run holds its slot
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: list[int] = []  # tickets in arrival order
        self._who: dict[int, tuple[str, str]] = {}  # ticket -> (address, session)
        self._running: dict[int, float] = {}  # ticket -> when it got its slot
        self._work: dict[int, float] = {}  # ticket -> lanes x new tokens asked for
        self._done: deque[tuple[float, float]] = deque(maxlen=history)  # (seconds held, work) of the last runs
        # When each address and session last got a slot; kept after their calls end, so leaving the line and
        # joining again does not jump it (pruned to the most recent SERVED_KEPT).
        self._served: OrderedDict[tuple[str, ...], float] = OrderedDict()
        self._ordered: list[int] | None = None  # the waiting tickets in starting order (None: to work out again)

    SERVED_KEPT = 4096

    def join(self, work: float = 1.0, session: str | None = None, address: str | None = None) -> int:
        """A ticket in the line for a run of `work` units from `session` at `address` (QueueFull past
        `max_waiting`)."""
        with self._lock:
            if len(self._waiting) >= self.max_waiting:
                raise QueueFull(
                    f"{len(self._waiting)} live runs are already waiting, the most this server queues: "
                    f"try again in a few minutes (the examples replay at once meanwhile)."
                )
            ticket = next(self._ids)
            self._waiting.append(ticket)
            self._ordered = None
            self._who[ticket] = (address or "?", session or "?")
            self._work[ticket] = max(1.0, float(work))
            return ticket

    def _order(self) -> list[int]:
        """The waiting tickets in the order they will start (see the class), worked out again only after the line
        changed (every waiting call polls for its slot ten times a second)."""
        if self._ordered is None:
            self._ordered = self._play_order()
        return self._ordered

    def _play_order(self) -> list[int]:
        """The line played forward, each start making its address and session the most recently served."""
        served: dict[tuple[str, ...], tuple[int, float]] = {k: (0, t) for k, t in self._served.items()}
        queues: dict[str, dict[str, deque[int]]] = {}
        for t in self._waiting:  # arrival order within each session
            address, session = self._who[t]
            queues.setdefault(address, {}).setdefault(session, deque()).append(t)

        def key(k: tuple[str, ...], first: int) -> tuple[int, float, int]:
            # Never served sorts first; ties go to the one whose oldest waiting call came first.
            return (*served.get(k, (0, float("-inf"))), first)

        order: list[int] = []
        for step in range(len(self._waiting)):
            address = min(queues, key=lambda a: key(("a", a), min(q[0] for q in queues[a].values())))
            sessions = queues[address]
            session = min(sessions, key=lambda s: key(("s", address, s), sessions[s][0]))
            order.append(sessions[session].popleft())
            served[("a", address)] = served[("s", address, session)] = (1, float(step))  # after every real start
            if not sessions[session]:
                del sessions[session]
            if not sessions:
                del queues[address]
        return order

    def try_start(self, ticket: int) -> bool:
        """Take a slot if one is free and no one the line puts first is still waiting for it; True once running."""
        with self._lock:
            if ticket in self._running:
                return True
            free = self.slots - len(self._running)
            if free > 0 and ticket in self._order()[:free]:
                self._waiting.remove(ticket)
                self._ordered = None
                now = self._running[ticket] = time.monotonic()
                address, session = self._who[ticket]
                for k in (("a", address), ("s", address, session)):
                    self._served.pop(k, None)
                    self._served[k] = now
                while len(self._served) > self.SERVED_KEPT:
                    self._served.popitem(last=False)
                return True
            return False

    def leave(self, ticket: int) -> None:
        """The run ended (or gave up waiting): its slot or its place goes to the next in line."""
        with self._lock:
            began = self._running.pop(ticket, None)
            work = self._work.pop(ticket, 1.0)
            self._who.pop(ticket, None)
            if began is not None:
                self._done.append((time.monotonic() - began, work))
            elif ticket in self._waiting:
                self._waiting.remove(ticket)
                self._ordered = None

    def rate(self) -> float:
        """Seconds a slot is held per unit of work over the last runs (their seconds over their work, so a short run
        that also loaded the model weighs little), else the typical figure. A run stopped at the cap did only part
        of its work: it counts only as a floor (the rate is at least its seconds over its work)."""
        with self._lock:
            capped = [(s, w) for s, w in self._done if self.cap_s is not None and s >= 0.95 * self.cap_s]
            whole = [(s, w) for s, w in self._done if (s, w) not in capped]
            work = sum(w for _, w in whole)
            rate = sum(s for s, _ in whole) / work if work else self.typical_s_per_unit
            return max([rate] + [s / w for s, w in capped])

    def hold_s(self, work: float, rate: float | None = None) -> float:
        """The seconds a run of `work` units is expected to hold its slot: its work at the rate, at most the cap."""
        hold = (self.rate() if rate is None else rate) * max(1.0, float(work))
        return min(hold, self.cap_s) if self.cap_s else hold

    def place(self, ticket: int) -> int:
        with self._lock:
            if ticket in self._running:
                return 0
            order = self._order()
            return order.index(ticket) + 1 if ticket in order else 0

    def counts(self) -> tuple[int, int]:
        """(runs decoding, runs waiting)."""
        with self._lock:
            return len(self._running), len(self._waiting)

    def estimate_s(self, ticket: int) -> float:
        """Seconds until this ticket gets a slot: the expected seconds of every run ahead of it in the line
        (`hold_s`), played over the slots after what the running ones have left (0 once running)."""
        rate = self.rate()
        now = time.monotonic()
        with self._lock:
            if ticket not in self._waiting:
                return 0.0
            order = self._order()
            ahead = order[: order.index(ticket)]
            # A run past its estimate is taken to end soon (a tenth of it), not never.
            free_at = [
                max(self.hold_s(self._work[t], rate) - (now - began), 0.1 * self.hold_s(self._work[t], rate))
                for t, began in self._running.items()
            ]
            holds = [self.hold_s(self._work[t], rate) for t in ahead]
        free_at += [0.0] * max(0, self.slots - len(free_at))
        heapq.heapify(free_at)
        for hold in holds:
            heapq.heappush(free_at, heapq.heappop(free_at) + hold)
        return free_at[0]

    def status(self, ticket: int) -> str:
        """What a waiting run's status line says: its place, the queue, the estimate and what it rests on."""
        place, (running, waiting) = self.place(ticket), self.counts()
        est, rate = self.estimate_s(ticket), self.rate()
        done = len(self._done)
        basis = (
            f"at the speed of the last {done} live run{'s' if done != 1 else ''}"
            if done
            else f"no live run has finished yet: {rate * 3 * 64:.0f} s per 64-token three-lane run is assumed"
        )
        capped = f", each at most {self.cap_s:g} s" if self.cap_s else ""
        return (
            f"Waiting for a live slot: {_ordinal(place)} in line ({running} of {self.slots} slot"
            f"{'s' if self.slots != 1 else ''} decoding, {waiting} waiting); about {est:.0f} s to go ({basis}"
            f"{capped}). Addresses, then tabs, take turns. Stop leaves the queue; recorded examples replay at once "
            f"meanwhile."
        )


LIVE = LiveQueue()


def request_client(request: Any) -> tuple[str | None, str | None]:
    """(session hash, client address) of a Gradio request (None for either that it lacks)."""
    session = getattr(request, "session_hash", None)
    try:
        host = request.client.host
    except Exception:  # noqa: BLE001 - a request without a client (tests, a direct call)
        host = None
    try:
        forwarded = dict(request.headers).get("x-forwarded-for")
    except Exception:  # noqa: BLE001
        forwarded = None
    return session, client_address(host, forwarded) if host else None


def running(request: Any):
    """`SHARE.running` for a handler's request."""
    return SHARE.running(*request_client(request))


class QueueShareMiddleware:
    """Refuses a counted event's `/queue/join` past its client's share (HTTP 422 in the shape Gradio's clients show
    as a message). `fn_indexes` are the counted events (the app's decoding calls); anything else passes untouched."""

    def __init__(self, app, fn_indexes: set[int] | None = None, share: ClientShare | None = None) -> None:
        self.app = app
        self.fn_indexes = fn_indexes if fn_indexes is not None else set()
        self.share = share or SHARE

    async def __call__(self, scope, receive, send) -> None:
        if (
            scope.get("type") != "http"
            or scope.get("method") != "POST"
            or not scope.get("path", "").endswith("/queue/join")
        ):
            await self.app(scope, receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, receive, send)
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        refused = self._refusal(scope, body)
        if refused is not None:
            await _send_json(
                send,
                422,
                {
                    "detail": [
                        {"__type__": "validate", "is_valid": False, "parameter_name": "queue", "message": refused}
                    ]
                },
            )
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _refusal(self, scope, body: bytes) -> str | None:
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            return None  # Gradio answers a malformed body itself
        if not isinstance(data, dict) or data.get("fn_index") not in self.fn_indexes:
            return None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client = scope.get("client") or (None, None)
        address = client_address(client[0], headers.get("x-forwarded-for")) if client[0] else None
        return self.share.join(data.get("session_hash"), address)


async def _send_json(send, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
