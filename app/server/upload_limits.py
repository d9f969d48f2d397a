"""Uploads checked by what they send, not only by what they say: every `POST .../gradio_api/upload` must give its
size (Content-Length, and not Transfer-Encoding as well: RFC 9112 makes that a request to refuse), be at most
`max_bytes`, fit its address's rate (`disk_cap.UploadRate`) and the disk cap (`disk_cap.DiskCap`) before
Gradio reads a byte; then its body is metered as it arrives: more bytes than it said, or more than `max_parts` files,
cut it off, and every file past the first is billed against the rate. A refusal is one plain-text line to the
client and one line in the log (`server_text.REFUSED`). An accepted upload's files belong to its address
(`file_owners.OWNERS`), so a full disk takes a flood's own files first.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass

import anyio

from app.server import client_share, disk_cap, file_owners, server_text
from app.server.disk_cap import MB, DiskCap, UploadRate

MAX_PARTS = 8  # files in one upload request: Load sends one


def _mb(n: float) -> str:
    return f"{n / MB:.0f} MB" if n >= 10 * MB else f"{n / MB:.1f} MB"


@dataclass
class Refusal:
    status: int
    message: str  # what the client reads
    limit: str  # what the log names
    headers: tuple[tuple[bytes, bytes], ...] = ()


class BodyMeter:
    """Counts a body's bytes and multipart delimiters as they arrive (a delimiter split across two chunks counts
    once: the last `len(delimiter) - 1` bytes are carried over)."""

    def __init__(self, declared: int, boundary: bytes | None) -> None:
        self.declared = declared
        self.delimiter = b"--" + boundary if boundary else b""
        self.bytes = 0
        self.delimiters = 0
        self._tail = b""

    def add(self, chunk: bytes) -> None:
        self.bytes += len(chunk)
        if self.delimiter:
            data = self._tail + chunk
            self.delimiters += data.count(self.delimiter)
            self._tail = data[-(len(self.delimiter) - 1) :]

    @property
    def parts(self) -> int:
        """Files (or fields) begun so far: every delimiter opens one but the closing one, which cannot be told
        apart until its end, so this may count one more while the last part is under way."""
        return self.delimiters


def boundary_of(content_type: str) -> bytes | None:
    match = re.search(r'boundary="?([^";,]+)"?', content_type or "")
    return match.group(1).encode("latin-1") if match else None


def _is_upload(scope) -> bool:
    return (
        scope.get("type") == "http"
        and scope.get("method") == "POST"
        and scope.get("path", "").rstrip("/").endswith("/gradio_api/upload")
    )


class UploadLimitMiddleware:
    """The upload checks above, as an ASGI middleware; everything else passes untouched."""

    def __init__(
        self,
        app,
        disk: DiskCap | None = None,
        rate: UploadRate | None = None,
        max_bytes: int = disk_cap.MAX_UPLOAD_BYTES,
        max_parts: int = MAX_PARTS,
        owners: file_owners.FileOwners | None = None,
        log: server_text.RefusalLog | None = None,
    ) -> None:
        self.app = app
        self.disk = disk or disk_cap.DISK
        self.rate = rate or disk_cap.RATE
        self.max_bytes = max_bytes
        self.max_parts = max_parts
        self.owners = file_owners.OWNERS if owners is None else owners
        self.log = server_text.REFUSED if log is None else log

    async def __call__(self, scope, receive, send) -> None:
        if not _is_upload(scope):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        address = client_share.scope_address(scope) or "?"
        refused = await self._refusal(headers, address)
        if refused is None:
            refused, reply = await self._metered(scope, receive, send, headers, address)
            if refused is None:
                self._own(reply, address)
                return
        self.log(refused.limit, address, refused.status)
        if refused.status:
            await _send_text(send, refused.status, refused.message, list(refused.headers))

    async def _refusal(self, headers: dict[str, str], address: str) -> Refusal | None:
        """The checks made from the headers, before a byte of the body is read."""
        if "transfer-encoding" in headers and "content-length" in headers:
            return Refusal(400, "An upload may not give both Content-Length and Transfer-Encoding.", "upload framing")
        try:
            size = int(headers["content-length"])
            if size < 0:
                raise ValueError
        except (KeyError, ValueError):
            return Refusal(411, "An upload must give its size (Content-Length).", "upload without a size")
        if size > self.max_bytes:
            return Refusal(
                413, f"An upload may be at most {_mb(self.max_bytes)}; this one is {_mb(size)}.", "upload size"
            )
        refused = self._rate(address, size)
        if refused is not None:
            return refused
        if not await anyio.to_thread.run_sync(self.disk.admit, size):
            return Refusal(
                507,
                "The server's upload space is full: try again in a few minutes.",
                "disk cap",
                ((b"retry-after", b"60"),),
            )
        return None

    def _rate(self, address: str, nbytes: int) -> Refusal | None:
        wait = self.rate.take(address, nbytes)
        if wait <= 0:
            return None
        return Refusal(
            429,
            f"Too many uploads from your address: {_mb(self.rate.bytes_per_s)}/s at most (a burst of "
            f"{_mb(self.rate.burst_bytes)}). Try again in {math.ceil(wait)} s.",
            "upload rate",
            ((b"retry-after", str(math.ceil(wait)).encode()),),
        )

    async def _metered(self, scope, receive, send, headers: dict[str, str], address: str):
        """Run Gradio's upload with its body metered; (the refusal that cut it off, or None; the reply's body)."""
        meter = BodyMeter(int(headers["content-length"]), boundary_of(headers.get("content-type", "")))
        cut: list[Refusal] = []
        started, reply = [False], []

        async def metered():
            if cut:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                billed = meter.parts
                meter.add(message.get("body", b""))
                refused = self._overrun(meter, billed, address)
                if refused is not None:
                    cut.append(refused)
                    return {"type": "http.disconnect"}  # Gradio stops reading; what it wrote is swept
            return message

        async def watched(message):
            if cut and not started[0]:
                return  # Gradio's answer to a body cut off is replaced by the refusal
            if message["type"] == "http.response.start":
                started[0] = True
            elif message["type"] == "http.response.body":
                reply.append(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, metered, watched)
        except Exception:
            if not cut:
                raise
        if cut:
            refusal = cut[0]
            return (Refusal(0, "", refusal.limit) if started[0] else refusal), b""
        return None, b"".join(reply)

    def _overrun(self, meter: BodyMeter, billed: int, address: str) -> Refusal | None:
        """A body that sends more than it said, or more files than allowed; each file past the first is billed."""
        if meter.bytes > meter.declared:
            return Refusal(400, "The upload sent more bytes than its Content-Length said.", "upload size")
        if meter.parts > self.max_parts + 1:  # the closing delimiter counts as one
            return Refusal(413, f"An upload may hold at most {self.max_parts} files.", "upload parts")
        for _ in range(max(billed, 2), meter.parts):  # the first file was billed by the size it said
            refused = self._rate(address, disk_cap.UPLOAD_MIN_CHARGE)
            if refused is not None:
                return refused
        return None

    def _own(self, reply: bytes, address: str) -> None:
        """The uploaded files (Gradio answers with their paths) belong to `address`."""
        try:
            paths = json.loads(reply or b"[]")
        except ValueError:
            return
        for path in paths if isinstance(paths, list) else []:
            if isinstance(path, str):
                try:
                    self.owners.upload(path, address, os.path.getsize(path))
                except OSError:
                    pass


async def _send_text(send, status: int, message: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = message.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
