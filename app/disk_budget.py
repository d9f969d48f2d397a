"""Disk bounded by a total: Gradio's upload folder (uploads, saved runs, Gradio's cached copies of outputs, the
temporary files its upload parser leaves) is swept by age and by size, and uploads are limited per client address
before their bytes reach the disk.

- `sweep` walks the folder itself, not Gradio's own list of the files it made: files Gradio never lists (a 0-byte
  temporary file per upload, copies made outside a handler) are swept too. Files older than the cache age go first,
  then the oldest until the folder is under its cap.
- `UploadRate` gives each client address a byte rate with a burst (a token bucket), so one address cannot fill the
  cap in seconds.
- `UploadLimitMiddleware` checks each `POST /gradio_api/upload` from its headers alone (Content-Length, the client's
  address): too large (413), over its address's rate (429) or no room left under the cap (507) is refused with a
  one-line message before Gradio writes anything.
"""

from __future__ import annotations

import math
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import anyio

MB = 2**20
DISK_CAP_BYTES = 2048 * MB  # `python app.py --disk-cap-mb`: a free Space's ~50 GB disk, far from full
UPLOAD_BYTES_PER_S = 2 * MB  # `--upload-mb-per-second`: per client address
UPLOAD_BURST_BYTES = 64 * MB  # what an address may upload at once: four of the largest saved runs
UPLOAD_MIN_CHARGE = 256 * 1024  # a tiny upload still costs a file and a folder: counted as this many bytes
MAX_UPLOAD_BYTES = 17 * MB  # one request: the largest saved run (16 MB, Gradio's max_file_size) and the form around it
SWEEP_EVERY_S = 15.0  # the periodic sweep; an upload over the cap also sweeps at once
FRESH_S = 60.0  # an empty folder younger than this may be an upload being moved into place


@dataclass
class SweepResult:
    removed: int  # files deleted
    freed: int  # their bytes
    left: int  # bytes of the files left


def _files(folder: Path) -> tuple[list[tuple[float, int, str]], list[tuple[float, str]]]:
    """(last touched, size, path) of every regular file under `folder`, and (mtime, path) of every folder below it,
    deepest first. Links are neither followed nor counted: the app writes none."""
    files, dirs = [], []
    stack = [str(folder)]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:  # deleted meanwhile, or unreadable: nothing of ours to count
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(entry.path)
                dirs.append((st.st_mtime, entry.path))
            elif stat.S_ISREG(st.st_mode):
                # ctime as well: a rename or Gradio's touch of a copy it hands out again makes a file new
                files.append((max(st.st_mtime, st.st_ctime), st.st_size, entry.path))
    dirs.sort(key=lambda d: d[1].count(os.sep), reverse=True)
    return files, dirs


def sweep(
    folder: Path,
    cap_bytes: int,
    age_s: float,
    room: int = 0,
    now: float | None = None,
    keep: Collection[str] = (),
) -> SweepResult:
    """Delete the files under `folder` older than `age_s`, then the oldest until the rest and `room` more bytes fit
    in `cap_bytes`; then the empty folders left (those older than FRESH_S). Files in `keep` count but are never
    deleted."""
    now = time.time() if now is None else now
    keep = set(keep)
    files, dirs = _files(Path(folder))
    files.sort()  # oldest first
    total = sum(size for _, size, _ in files)
    removed = freed = 0
    for touched, size, path in files:
        if now - touched <= age_s and total + room <= cap_bytes:
            break  # everything after this one is newer and fits
        if path in keep:
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:  # deleted meanwhile (Gradio's own sweep, a save replacing it)
            pass
        except OSError:
            continue
        total -= size
        removed, freed = removed + 1, freed + size
    for mtime, path in dirs:
        if now - mtime > FRESH_S:
            try:
                os.rmdir(path)  # only an empty one goes
            except OSError:
                pass
    return SweepResult(removed, freed, total)


class DiskBudget:
    """One folder's cap: swept every SWEEP_EVERY_S by a daemon thread, and on demand when an upload needs room.
    `used` is the folder's size at the last sweep plus the uploads admitted since."""

    def __init__(
        self,
        folder: Path | None = None,
        cap_bytes: int = DISK_CAP_BYTES,
        age_s: float = 600.0,
        keep: Callable[[], Collection[str]] | None = None,
    ) -> None:
        self.folder = folder
        self.cap_bytes = cap_bytes
        self.age_s = age_s
        self.keep = keep
        self.used = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def sweep(self, room: int = 0) -> SweepResult:
        if self.folder is None:
            return SweepResult(0, 0, 0)
        with self._lock:
            result = sweep(self.folder, self.cap_bytes, self.age_s, room=room, keep=self.keep() if self.keep else ())
            self.used = result.left
        return result

    def admit(self, nbytes: int) -> bool:
        """Whether an upload of `nbytes` fits under the cap (sweeping the oldest files to make room if it does not
        yet); if so, it is counted until the next sweep measures the folder again."""
        if self.folder is None:
            return True
        if nbytes > self.cap_bytes:
            return False
        with self._lock:
            if self.used + nbytes <= self.cap_bytes:
                self.used += nbytes
                return True
        left = self.sweep(room=nbytes).left
        with self._lock:
            if left + nbytes > self.cap_bytes:  # only files it may not delete are left
                return False
            self.used += nbytes
            return True

    def start(self, every_s: float = SWEEP_EVERY_S) -> None:
        """Sweep now and then every `every_s` seconds in a daemon thread (once per process)."""
        if self._thread is not None or self.folder is None:
            return

        def loop() -> None:
            while True:
                try:
                    result = self.sweep()
                    if result.removed:
                        print(
                            f"[poss] disk: swept {result.removed} files ({result.freed / MB:.1f} MB); "
                            f"{result.left / MB:.1f} of {self.cap_bytes / MB:.0f} MB in use",
                            file=sys.stderr,
                            flush=True,
                        )
                except Exception as err:  # noqa: BLE001 - the sweep must outlive one bad pass
                    print(f"[poss] disk sweep failed: {type(err).__name__}", file=sys.stderr, flush=True)
                time.sleep(every_s)

        self._thread = threading.Thread(target=loop, daemon=True, name="poss-disk-sweep")
        self._thread.start()


class UploadRate:
    """A byte rate per client key with a burst (a token bucket): `take` answers 0 when the bytes may go now (and
    counts them), else the seconds until they could."""

    def __init__(
        self,
        bytes_per_s: float = UPLOAD_BYTES_PER_S,
        burst_bytes: float = UPLOAD_BURST_BYTES,
        max_keys: int = 4096,
    ) -> None:
        self.bytes_per_s = bytes_per_s
        self.burst_bytes = burst_bytes
        self.max_keys = max_keys
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when)
        self._lock = threading.Lock()

    def take(self, key: str, nbytes: int, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        cost = max(nbytes, UPLOAD_MIN_CHARGE)
        if cost > self.burst_bytes:
            return math.inf
        with self._lock:
            tokens, when = self._buckets.get(key, (self.burst_bytes, now))
            tokens = min(self.burst_bytes, tokens + (now - when) * self.bytes_per_s)
            if tokens < cost:
                self._buckets[key] = (tokens, now)
                return (cost - tokens) / self.bytes_per_s
            self._buckets[key] = (tokens - cost, now)
            if len(self._buckets) > self.max_keys:
                self._forget_full(now)
            return 0.0

    def _forget_full(self, now: float) -> None:
        """Drop the keys whose bucket has refilled (they are as new ones), so many addresses cost no memory."""
        for key, (tokens, when) in list(self._buckets.items()):
            if tokens + (now - when) * self.bytes_per_s >= self.burst_bytes:
                del self._buckets[key]


BUDGET = DiskBudget()
RATE = UploadRate()


def _mb(n: float) -> str:
    return f"{n / MB:.0f} MB" if n >= 10 * MB else f"{n / MB:.1f} MB"


class UploadLimitMiddleware:
    """Checks every `POST .../gradio_api/upload` before Gradio reads its body: it must say its size, be at most
    `max_bytes`, fit its address's rate (UploadRate) and fit under the disk cap (DiskBudget); otherwise one plain-text
    line and 411, 413, 429 or 507. Everything else passes untouched."""

    def __init__(
        self,
        app,
        budget: DiskBudget | None = None,
        rate: UploadRate | None = None,
        max_bytes: int = MAX_UPLOAD_BYTES,
    ) -> None:
        self.app = app
        self.budget = budget or BUDGET
        self.rate = rate or RATE
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if (
            scope.get("type") == "http"
            and scope.get("method") == "POST"
            and scope.get("path", "").rstrip("/").endswith("/gradio_api/upload")
        ):
            refused = await self._refusal(scope)
            if refused is not None:
                status, message, headers = refused
                await _send_text(send, status, message, headers)
                return
        await self.app(scope, receive, send)

    async def _refusal(self, scope) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        from .client_share import client_address

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            size = int(headers["content-length"])
            if size < 0:
                raise ValueError
        except (KeyError, ValueError):
            return 411, "An upload must give its size (Content-Length).", []
        if size > self.max_bytes:
            return 413, f"An upload may be at most {_mb(self.max_bytes)}; this one is {_mb(size)}.", []
        host = (scope.get("client") or (None, None))[0]
        address = client_address(host, headers.get("x-forwarded-for")) if host else "?"
        wait = self.rate.take(address, size)
        if wait > 0:
            return (
                429,
                f"Too many uploads from your address: {_mb(self.rate.bytes_per_s)}/s at most (a burst of "
                f"{_mb(self.rate.burst_bytes)}). Try again in {math.ceil(wait)} s.",
                [(b"retry-after", str(math.ceil(wait)).encode())],
            )
        if not await anyio.to_thread.run_sync(self.budget.admit, size):
            return 507, "The server's upload space is full: try again in a few minutes.", [(b"retry-after", b"60")]
        return None


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
