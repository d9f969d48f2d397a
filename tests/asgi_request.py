"""One HTTP request through an ASGI app or middleware, in-process: what the server modules' middlewares are tested
with."""

from __future__ import annotations

import asyncio
from typing import Any


def asgi_request(
    asgi,
    method: str,
    path: str,
    chunks: list[bytes] | tuple[bytes, ...] = (b"",),
    headers: dict[str, str] | None = None,
    client: str = "127.0.0.1",
    **scope: Any,
) -> list[dict]:
    """Send one request to `asgi` (its body in `chunks`, one receive each; `scope` adds keys such as query_string)
    and return the messages it sent back."""
    pending, sent = list(chunks), []

    async def receive():
        body = pending.pop(0) if pending else b""
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message):
        sent.append(message)

    request = {
        "type": "http",
        "method": method,
        "path": path,
        "client": (client, 5000),
        "headers": [(k.encode(), v.encode()) for k, v in (headers or {}).items()],
        **scope,
    }
    asyncio.run(asgi(request, receive, send))
    return sent


def body_of(sent: list[dict]) -> bytes:
    """The reply's body, from its body messages."""
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
