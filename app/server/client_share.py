"""Each client's share of the queue: every event a visitor can put in Gradio's queue is counted per browser tab or API
client (its Gradio session hash) and per address from its join until it ends, and refused past the share with a
message that says why, so one client cannot hold the queue's places or the workers every other client waits for.
Calls (anything that may wait for a worker: Run, Step, Replay, an example, Load, the Evidence tab's loads, /compare)
have the call share (2 per tab, 40 per address); light events (a page load, a view toggle, Stop, Save), which never
wait, the light share (8 and 160), since each still holds its reply until it is read.

Counting: `QueueShareMiddleware` (an ASGI middleware on the app, `launch(app_kwargs={"middleware": ...})`) reads each
`/queue/join`, admits it with a ticket or refuses it, and hands the pages and streams it sees to `tabs.TabWatch`: a
ticket goes back when its reply is read on the session's stream, when its handler ends (a decoding handler counts
its call as running from its start: `ClientShare.running`), when its session is dropped for not reading its
replies, or `pending_ttl_s` after its join. A tab's events (all but /compare, the API's) are taken only while its
page is open (its heartbeat stream), and no event group may fill more than half of Gradio's line.

Why by hand: Gradio's queue bounds its total size (`max_size`) and each event group's concurrency, not what one
session or one address may hold, and it refuses a join only when the whole queue is full. Reading `/queue/join`'s
body (its `fn_index` and `session_hash`) is the one place a call can be refused before it takes a place in line."""

from __future__ import annotations

import ipaddress
import itertools
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from app.server import gradio_queue
from app.server.limits import DEFAULTS
from app.server.tabs import TabWatch

# Trusted proxy hops (`python app.py --proxy-hops`): the client's address is the entry the outermost trusted proxy
# appended to X-Forwarded-For, counted from the right; 0 ignores the header (the peer's address is the client's).
PROXY_HOPS = DEFAULTS.proxy_hops


def client_address(host: str | None, forwarded_for: str | None, hops: int | None = None) -> str:
    """The client's address: with `hops` trusted proxies (PROXY_HOPS) in front of the app, the `hops`-th
    X-Forwarded-For entry from the right, which the first trusted proxy appended for the peer it saw; never an
    entry the client wrote, so a client cannot invent addresses by sending the header. The header counts only
    from a private or loopback peer (a proxy); a public peer, a header with fewer entries than hops, or
    `hops` 0 give the peer's own address."""
    host = host or "?"
    hops = PROXY_HOPS if hops is None else hops
    if hops <= 0 or not forwarded_for:
        return host
    try:
        peer = ipaddress.ip_address(host)
    except ValueError:
        return host
    if not (peer.is_private or peer.is_loopback):
        return host
    entries = [e.strip() for e in forwarded_for.split(",")]
    if len(entries) < hops or not entries[-hops]:
        return host
    return entries[-hops]


@dataclass
class Ticket:
    """One admitted event, held against its keys until it starts (a decoding call) or is given back."""

    keys: tuple[str, ...]
    joined: float


class ClientShare:
    """Events held per client key ("session:HASH", "address:IP"; "light-session:", "light-address:" for the light
    share), with a limit per kind. An event is held from its join (a ticket) until its handler starts it
    (`running`: counted as running until it ends), its reply is read, its session is dropped (`release`), or, never
    started, `pending_ttl_s` after its join."""

    def __init__(
        self,
        per_client: int = DEFAULTS.per_client,
        per_address: int = DEFAULTS.per_address,
        pending_ttl_s: float = 120.0,
        light_per_client: int = DEFAULTS.light_per_client,
        light_per_address: int = DEFAULTS.light_per_address,
    ) -> None:
        self.per_client = per_client
        self.per_address = per_address
        self.light_per_client = light_per_client
        self.light_per_address = light_per_address
        self.pending_ttl_s = pending_ttl_s
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._tickets: dict[int, Ticket] = {}
        self._by_key: dict[str, set[int]] = defaultdict(set)
        self._running: dict[str, int] = defaultdict(int)

    @staticmethod
    def keys(session: str | None, address: str | None, light: bool = False) -> list[str]:
        prefix = "light-" if light else ""
        return [f"{prefix}session:{session or '?'}", f"{prefix}address:{address or '?'}"]

    def _limit(self, key: str) -> int:
        light = key.startswith("light-")
        if key.split(":", 1)[0].endswith("session"):
            return self.light_per_client if light else self.per_client
        return self.light_per_address if light else self.per_address

    def _expire(self, now: float) -> None:
        for t in [t for t, ticket in self._tickets.items() if now - ticket.joined >= self.pending_ttl_s]:
            self._drop(t)

    def _drop(self, t: int) -> None:
        ticket = self._tickets.pop(t, None)
        for key in ticket.keys if ticket else ():
            self._by_key[key].discard(t)
            if not self._by_key[key]:
                del self._by_key[key]

    def _held(self, key: str) -> int:
        return len(self._by_key.get(key, ())) + self._running.get(key, 0)

    def admit(self, session: str | None, address: str | None, light: bool = False) -> tuple[str | None, int | None]:
        """Count an event asking to join the queue: (why it is refused, None) with nothing counted, else (None, its
        ticket)."""
        now = time.monotonic()
        keys = self.keys(session, address, light)
        with self._lock:
            self._expire(now)
            for key in keys:
                limit = self._limit(key)
                if limit > 0 and self._held(key) >= limit:
                    return _share_used(key, limit), None
            t = next(self._ids)
            self._tickets[t] = Ticket(tuple(keys), now)
            for key in keys:
                self._by_key[key].add(t)
        return None, t

    def join(self, session: str | None, address: str | None, light: bool = False) -> str | None:
        """`admit`, for a caller that needs no ticket: why the event is refused, else None."""
        return self.admit(session, address, light)[0]

    def release(self, ticket: int) -> None:
        """The event's ticket goes back (its reply was read, its join refused, or its session dropped)."""
        with self._lock:
            self._drop(ticket)

    @contextmanager
    def running(self, session: str | None, address: str | None, ticket: int | None = None) -> Iterator[None]:
        """A handler's call from its start to its end: its ticket (else the session's oldest) is no longer pending,
        and the call counts as running until it ends."""
        keys = self.keys(session, address)
        with self._lock:
            if ticket not in self._tickets:
                ticket = min(self._by_key.get(keys[0], ()), default=None)
            self._drop(ticket)
            for key in keys:
                self._running[key] += 1
        try:
            yield
        finally:
            with self._lock:
                for key in keys:
                    self._running[key] -= 1
                    if self._running[key] <= 0:
                        del self._running[key]

    def held(self, session: str | None, address: str | None, light: bool = False) -> tuple[int, int]:
        """(events held by the session, by the address): for tests and the load check."""
        with self._lock:
            self._expire(time.monotonic())
            return tuple(self._held(k) for k in self.keys(session, address, light))  # type: ignore[return-value]


def _share_used(key: str, limit: int) -> str:
    """What a client is told when `key`'s share is used up."""
    who = "this tab (or API client)" if key.split(":", 1)[0].endswith("session") else "your address"
    return (
        f"{who} already has {limit} call{'s' if limit != 1 else ''} waiting or running, the most "
        f"this server gives one client: wait for one to finish (or Stop it), then try again."
    )


SHARE = ClientShare()


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
    """`SHARE.running` for a handler's request (its ticket, when the middleware admitted it)."""
    try:
        ticket = request.request.scope.get(TICKET)
    except Exception:  # noqa: BLE001 - a request without its ASGI scope (tests, a direct call)
        ticket = None
    return SHARE.running(*request_client(request), ticket=ticket)


TICKET = "poss.share_ticket"  # the scope key a join's ticket rides on to its handler (`running`)


@dataclass
class Events:
    """The app's events as the share counts them, by fn_index: `calls` in the call share (anything that may wait for
    a worker, and the live runs), `light` in the light share, `paged` only from an open page, and each call's
    concurrency group (`groups`), whose waiting events may fill at most half of Gradio's line."""

    calls: set[int] = field(default_factory=set)
    light: set[int] = field(default_factory=set)
    paged: set[int] = field(default_factory=set)
    groups: dict[int, str] = field(default_factory=dict)


class QueueShareMiddleware:
    """Every `/queue/join` of the app's events, counted against its client's share (client_share.ClientShare) and
    refused past it, from a session whose page is not open (a `paged` event), or when its group already fills half
    of Gradio's line (HTTP 422 in the shape Gradio's clients show as a message); a `/queue/data` stream for a session
    the queue does not know is refused (404, where Gradio would log a trace each time). The pages and streams it sees
    go to a `tabs.TabWatch`, which gives a ticket back once its event's reply is read and drops a session whose
    replies nobody reads. `fn_indexes` (the call share's events, all from any session) stands for `events` in tests.
    Each refusal is a line in the log (`server_text.REFUSED`)."""

    def __init__(
        self,
        app,
        fn_indexes: set[int] | None = None,
        share: ClientShare | None = None,
        events: Events | Callable[[], Events] | None = None,
        watch: TabWatch | None = None,
    ) -> None:
        self.app = app
        self._events = events if events is not None else Events(calls=set(fn_indexes or ()))
        self.share = share or SHARE
        self.watch = watch or TabWatch(self.share.release)

    @property
    def events(self) -> Events:
        if callable(self._events):
            self._events = self._events()  # read once the app's events are all wired
        return self._events

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        method = scope.get("method")
        if hasattr(scope.get("app"), "state_holder"):  # Gradio's app (not a test's): the watch runs on its loop
            self.watch.watch(scope["app"])
        if method == "GET" and "/heartbeat/" in path:
            await self._page(scope, receive, send, path.rsplit("/", 1)[-1])
        elif method == "GET" and path.endswith("/queue/data"):
            await self._stream(scope, receive, send)
        elif method == "POST" and path.endswith("/queue/join"):
            await self._join(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _page(self, scope, receive, send, session: str) -> None:
        """A page's heartbeat: counted open while it lasts (an address past its open pages is refused, 429)."""
        address = scope_address(scope) or "?"
        if not self.watch.page_opened(session, address):
            _log_refusal("the open pages per address", scope)
            await _send_json(send, 429, {"detail": "Too many pages open from your address."})
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.watch.page_closed(session, address)

    async def _stream(self, scope, receive, send) -> None:
        session = _query(scope, "session_hash")
        queue = gradio_queue.queue_of(scope.get("app"))
        if queue is not None and not gradio_queue.knows_session(queue, session):
            _log_refusal("an unknown session's queue stream", scope)
            await _send_json(send, 404, {"detail": "Session not found."})
            return

        async def watched(message):
            if message["type"] == "http.response.body":
                self.watch.read(message.get("body", b""))
            await send(message)

        self.watch.stream_opened(session)
        try:
            await self.app(scope, receive, watched)
        finally:
            self.watch.stream_closed(session)

    async def _join(self, scope, receive, send) -> None:
        body, rest = await whole_body(receive)
        if rest is not None:
            await self.app(scope, rest, send)
            return
        data = _json_object(body)
        fn = data.get("fn_index")
        events, session = self.events, str(data.get("session_hash") or "")
        if fn not in events.calls and fn not in events.light:
            await self.app(scope, replay_body(body, receive), send)
            return
        refused = await self._refusal(scope, fn, session)
        if refused is None:
            refused, ticket = self.share.admit(session, scope_address(scope), light=fn not in events.calls)
            if refused is not None:
                _log_refusal("the share of calls per tab and address", scope)
        if refused is not None:
            await _send_refusal(send, refused)
            return
        held = self.watch.admitted(ticket, session)
        answer: list[bytes] = []
        status = [0]

        async def answered(message):
            if message["type"] == "http.response.start":
                status[0] = message.get("status", 0)
            elif message["type"] == "http.response.body":
                answer.append(message.get("body", b""))
            await send(message)

        try:
            await self.app({**scope, TICKET: ticket}, replay_body(body, receive), answered)
        finally:
            event_id = _json_object(b"".join(answer)).get("event_id")
            self.watch.answered(held, status[0] == 200, event_id if isinstance(event_id, str) else None)

    async def _refusal(self, scope, fn: int, session: str) -> str | None:
        """Why a join is refused before the share is asked: its page is not open, or its group fills half the line."""
        events = self.events
        if fn in events.paged and not await self.watch.page_open(session):
            _log_refusal("a call from a session without an open page", scope)
            return "This tab is not connected to the server (its page was closed or never loaded): reload the page."
        queue = gradio_queue.queue_of(scope.get("app"))
        group = events.groups.get(fn)
        size = gradio_queue.line_size(queue) if queue is not None else None
        if group is not None and size and gradio_queue.waiting(queue, group) >= size // 2:
            _log_refusal("the waiting calls per event group", scope)
            return "The server is busy with this kind of call: try again in a minute."
        return None


async def whole_body(receive) -> tuple[bytes, Any]:
    """A request's body, read whole (bounded by body_cap.BodyCapMiddleware, outside): (body, None), or (b"", a
    receive that replays the message that ended it) when the client went away."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":

            async def gone():
                return message

            return b"", gone
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks), None


def replay_body(body: bytes, receive):
    """A receive that gives `body` once, then whatever the client sends next (its disconnect)."""
    sent = [False]

    async def replay():
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _json_object(body: bytes) -> dict:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return {}  # Gradio answers a malformed body itself
    return data if isinstance(data, dict) else {}


def _query(scope, name: str) -> str:
    from urllib.parse import parse_qs

    return parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name, [""])[0]


async def _send_refusal(send, message: str) -> None:
    """A refused join, in the shape Gradio's clients show as a message."""
    detail = [{"__type__": "validate", "is_valid": False, "parameter_name": "queue", "message": message}]
    await _send_json(send, 422, {"detail": detail})


def scope_address(scope) -> str | None:
    """The client address of an ASGI request (`client_address` of its peer and X-Forwarded-For)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    client = scope.get("client") or (None, None)
    return client_address(client[0], headers.get("x-forwarded-for")) if client[0] else None


def _log_refusal(limit: str, scope) -> None:
    from app.server.server_text import REFUSED

    REFUSED(limit, scope_address(scope))


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
