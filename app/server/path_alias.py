"""Replies name no server folder. Gradio's protocol passes a file by its path on the server (an upload's answer, a
File output's `path` and `url`, a download's `/file=` route), which would tell every visitor where the server keeps
its files. `PathAliasMiddleware` writes the upload folder as `ALIAS` in every JSON and event-stream reply and writes
it back in every request that can carry it (a JSON body, a `/file=` path), so Gradio inside sees its own paths and a
client sees only the alias."""

from __future__ import annotations

import os
from collections.abc import Callable

ALIAS = "/gradio-files"  # what a client sees in place of the upload folder
TEXT_REPLIES = (b"application/json", b"text/event-stream")


def folder_forms(folder: str) -> list[str]:
    """The folder as written and with links resolved, longest first (a path may come in either form)."""
    forms = {folder.rstrip(os.sep), os.path.realpath(folder).rstrip(os.sep)}
    return sorted((f for f in forms if len(f) > 1), key=len, reverse=True)


class PathAliasMiddleware:
    """The alias above, as an ASGI middleware (outermost, so the app's other middlewares see real paths).
    `folder` gives the upload folder, read once at the first request (after Gradio has settled it)."""

    def __init__(self, app, folder: Callable[[], str]) -> None:
        self.app = app
        self.folder = folder
        self._forms: tuple[list[bytes], bytes] | None = None  # (every form, longest first; the form as written)

    def _folder(self) -> tuple[list[bytes], bytes]:
        if self._forms is None:
            folder = self.folder()
            self._forms = ([f.encode() for f in folder_forms(folder)], folder.rstrip(os.sep).encode())
        return self._forms

    def _out(self, data: bytes) -> bytes:
        for form in self._folder()[0]:
            data = data.replace(form, ALIAS.encode())
        return data

    def _in(self, data: bytes) -> bytes:
        written = self._folder()[1]
        return data.replace(ALIAS.encode() + b"/", written + b"/") if len(written) > 1 else data

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") != "http" or "/gradio_api/" not in scope.get("path", ""):
            await self.app(scope, receive, send)
            return
        scope = self._in_path(scope)
        if scope.get("method") == "POST" and _header(scope, b"content-type").startswith(b"application/json"):
            scope, receive = await self._in_body(scope, receive)
        await self.app(scope, receive, self._replies(send))

    def _in_path(self, scope) -> dict:
        """A `/file=` route names the alias: the path Gradio serves from is the folder's."""
        path = scope.get("path", "")
        if "/file=" + ALIAS + "/" not in path:
            return scope
        new = self._in(path.encode()).decode()
        return {**scope, "path": new, "raw_path": new.encode()}

    async def _in_body(self, scope, receive):
        """A JSON body read whole, the alias written back, replayed to the app with its new length."""
        from app.server.client_share import replay_body, whole_body

        body, gone = await whole_body(receive)
        if gone is not None:
            return scope, gone
        body = self._in(body)
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        return {**scope, "headers": headers}, replay_body(body, receive)

    def _replies(self, send):
        """`send` with the folder written as the alias in JSON (read whole, its length set again) and event-stream
        replies (each message as it goes: Gradio sends one whole event per message)."""
        kind: list[str] = [""]
        start: list[dict] = []
        held: list[bytes] = []

        async def wrapped(message):
            if message["type"] == "http.response.start":
                ctype = dict((k.lower(), v) for k, v in message.get("headers", [])).get(b"content-type", b"")
                kind[0] = next((t.decode() for t in TEXT_REPLIES if ctype.startswith(t)), "")
                if kind[0] == "application/json":
                    start.append(message)  # sent with the body, once its new length is known
                    return
                await send(message)
                return
            if message["type"] != "http.response.body" or not kind[0]:
                await send(message)
                return
            if kind[0] == "text/event-stream":
                await send({**message, "body": self._out(message.get("body", b""))})
                return
            held.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = self._out(b"".join(held))
            headers = [(k, v) for k, v in start[0].get("headers", []) if k.lower() != b"content-length"]
            await send({**start[0], "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        return wrapped


def _header(scope, name: bytes) -> bytes:
    return next((v for k, v in scope.get("headers", []) if k.lower() == name), b"")
