"""One cap on every request body, in the outermost middleware: the server's other middlewares (the path alias, the
queue share) and Gradio's routes read a JSON body whole, so without it one large body costs its size several times
over in memory. A body is refused (413, one plain-text line, one line in the log) by its Content-Length before a
byte of it is read, and, sent without one (chunked), by its bytes as they arrive: past the cap the app sees the client
go away and the client gets the 413. Uploads (`.../gradio_api/upload`) keep their own, larger cap and checks
(upload_limits.UploadLimitMiddleware, inside)."""

from __future__ import annotations

from app.server import client_share, server_text
from app.server.limits import DEFAULTS

BODY_CAP_BYTES = DEFAULTS.body_bytes  # `python app.py --max-body-mb` (server_state.install sets it)


def _is_upload(scope) -> bool:
    return scope.get("path", "").rstrip("/").endswith("/gradio_api/upload")


def declared_length(scope) -> int | None:
    """The request's Content-Length (None: not given, or not a number)."""
    for key, value in scope.get("headers", []):
        if key.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyCapMiddleware:
    """The cap above as an ASGI middleware; uploads and anything but HTTP pass untouched."""

    def __init__(self, app, cap_bytes: int | None = None, log: server_text.RefusalLog | None = None) -> None:
        self.app = app
        self.cap_bytes = cap_bytes
        self.log = log

    @property
    def cap(self) -> int:
        return self.cap_bytes if self.cap_bytes is not None else BODY_CAP_BYTES

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") != "http" or _is_upload(scope):
            await self.app(scope, receive, send)
            return
        size = declared_length(scope)
        if size is not None and size > self.cap:
            await self._refuse(scope, send)
            return
        await self._metered(scope, receive, send)

    async def _metered(self, scope, receive, send) -> None:
        """Run the app with the body counted as it arrives; past the cap it sees a disconnect and the client a 413."""
        got, over, started = [0], [False], [False]

        async def counted():
            if over[0]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                got[0] += len(message.get("body", b""))
                if got[0] > self.cap:
                    over[0] = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message):
            if over[0] and not started[0]:
                return  # the app's answer to a body cut off is replaced by the 413
            if message["type"] == "http.response.start":
                started[0] = True
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not over[0]:
                raise
        if over[0] and not started[0]:
            await self._refuse(scope, send)

    async def _refuse(self, scope, send) -> None:
        (self.log or server_text.REFUSED)("the request body size", client_share.scope_address(scope), 413)
        body = f"A request body may be at most {self.cap // 1024} kB.".encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
