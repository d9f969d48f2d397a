"""Each client's share of the queue: at most so many decoding calls (Run, Step, Replay, /compare) waiting or running
per browser tab or API client (its Gradio session hash) and per address. A call past its client's share
is refused when it asks to join the queue, with a message that says why, so one client cannot hold the queue's slots
or the decoding workers that every other client waits for.

Counting: `QueueShareMiddleware` (an ASGI middleware on the app, `launch(app_kwargs={"middleware": ...})`) reads each
`/queue/join` request of a counted event and adds it as pending; the handler moves it to running when it starts
(`ClientShare.running`) and lets it go when it ends, however it ends. A pending call that never starts (its client
left, or cancelled it, while it waited) stops counting after `pending_ttl_s`.

Why by hand: Gradio's queue bounds its total size (`max_size`) and each event group's concurrency, not what one
session or one address may hold, and it refuses a join only when the whole queue is full. Reading `/queue/join`'s
body (its `fn_index` and `session_hash`) is the one place a call can be refused before it takes a place in line."""

from __future__ import annotations

import ipaddress
import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PER_CLIENT = 2  # calls waiting or running per session (`python app.py --max-calls-per-client`)
# Per client address (`--max-calls-per-address`; 0: no limit). A class behind one NAT shares one address: thirty
# students with a call each fit, and the line's turns keep one address's calls from delaying other addresses.
PER_ADDRESS = 40


def _spaces_hops() -> int:
    """Proxies in front of the app that append to X-Forwarded-For: one on a Hugging Face Space (its router), none
    when run locally."""
    return 1 if os.environ.get("SPACE_ID") else 0


# Trusted proxy hops (`python app.py --proxy-hops`): the client's address is the entry the outermost trusted proxy
# appended to X-Forwarded-For, counted from the right; 0 ignores the header (the peer's address is the client's).
PROXY_HOPS = _spaces_hops()


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
    as a message), and a `/queue/data` stream for a session the queue does not know (404, where Gradio would log a
    trace each time). `fn_indexes` are the counted events (the app's decoding calls); anything else passes
    untouched. Each refusal is a line in the log (`server_text.REFUSED`)."""

    def __init__(self, app, fn_indexes: set[int] | None = None, share: ClientShare | None = None) -> None:
        self.app = app
        self.fn_indexes = fn_indexes if fn_indexes is not None else set()
        self.share = share or SHARE

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        if scope.get("method") == "GET" and path.endswith("/queue/data") and not _known_session(scope):
            _log_refusal("an unknown session's queue stream", scope)
            await _send_json(send, 404, {"detail": "Session not found."})
            return
        if scope.get("method") != "POST" or not path.endswith("/queue/join"):
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
            _log_refusal("the share of calls per tab and address", scope)
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
        return self.share.join(data.get("session_hash"), scope_address(scope))


def scope_address(scope) -> str | None:
    """The client address of an ASGI request (`client_address` of its peer and X-Forwarded-For)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    client = scope.get("client") or (None, None)
    return client_address(client[0], headers.get("x-forwarded-for")) if client[0] else None


def _log_refusal(limit: str, scope) -> None:
    from app.server.server_text import REFUSED

    REFUSED(limit, scope_address(scope))


def _known_session(scope) -> bool:
    """Whether `/queue/data`'s session_hash is one Gradio's queue has messages for (True when it cannot tell)."""
    from urllib.parse import parse_qs

    try:
        queue = scope["app"].get_blocks()._queue
        session = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_hash", [""])[0]
    except Exception:  # noqa: BLE001 - not Gradio's app (a test): let it answer
        return True
    return session in queue.pending_messages_per_session


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
