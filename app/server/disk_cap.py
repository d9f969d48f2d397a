"""Disk bounded by a total: Gradio's upload folder (uploads, saved runs, Gradio's cached copies of outputs, the
temporary files its upload parser leaves) is swept by age and by size, and uploads are limited per client address
before their bytes reach the disk.

- `sweep` walks the folder itself, not Gradio's own list of the files it made: files Gradio never lists (a 0-byte
  temporary file per upload, copies made outside a handler) are swept too. Files older than the cache age go first,
  then the oldest until the folder is under its cap.
- `UploadRate` gives each client address a byte rate with a burst (a token bucket), so one address cannot fill the
  cap in seconds.
- When the folder is over its cap, a flood loses its own files first (`app/server/file_owners.py` says who owns what);
  protected saved runs are never deleted. `app/server/upload_limits.py` checks each upload against the rate and the cap.
"""

from __future__ import annotations

import math
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from app.server.limits import DEFAULTS, MB

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
    address_of: Callable[[str], str | None] | None = None,
    share_bytes: int = 64 * MB,
) -> SweepResult:
    """Delete the files under `folder` older than `age_s`; then, until the rest and `room` more bytes fit in
    `cap_bytes`: the oldest files of the address (`address_of`) holding the most past `share_bytes` (a flood loses
    its own files first), then the oldest unowned files, then the oldest owned ones; then the empty folders left
    (those older than FRESH_S). Files in `keep` count but are never deleted."""
    now = time.time() if now is None else now
    keep = set(keep)
    files, dirs = _files(Path(folder))
    files.sort()  # oldest first
    total = sum(size for _, size, _ in files)
    gone: set[str] = set()
    freed = 0

    def delete(size: int, path: str) -> None:
        nonlocal total, freed
        try:
            os.unlink(path)
        except FileNotFoundError:  # deleted meanwhile (Gradio's own sweep, a save replacing it)
            pass
        except OSError:
            return
        total, freed = total - size, freed + size
        gone.add(path)

    for touched, size, path in files:
        if now - touched > age_s and path not in keep:
            delete(size, path)
    for _, size, path in _over_cap_order(files, keep, gone, address_of, share_bytes):
        if total + room <= cap_bytes:
            break
        delete(size, path)
    for mtime, path in dirs:
        if now - mtime > FRESH_S:
            try:
                os.rmdir(path)  # only an empty one goes
            except OSError:
                pass
    return SweepResult(len(gone), freed, total)


def _over_cap_order(
    files: list[tuple[float, int, str]],
    keep: set[str],
    gone: set[str],
    address_of: Callable[[str], str | None] | None,
    share_bytes: int,
) -> Iterator[tuple[float, int, str]]:
    """The files a full folder loses, in order (`files` oldest first, none of `keep` or `gone`): each time the
    oldest deletable file of the address holding the most past `share_bytes` (counting all it holds, kept files
    too), then unowned files, then owned ones, oldest first."""
    owner = {path: address_of(path) if address_of else None for _, _, path in files}
    held: dict[str, int] = {}
    queues: dict[str, list[tuple[float, int, str]]] = {}
    for f in files:
        address = owner[f[2]]
        if address is None or f[2] in gone:
            continue
        held[address] = held.get(address, 0) + f[1]
        if f[2] not in keep:
            queues.setdefault(address, []).append(f)
    while True:
        over = [a for a in queues if queues[a] and held[a] > share_bytes]
        if not over:
            break
        address = max(over, key=held.__getitem__)
        f = queues[address].pop(0)
        held[address] -= f[1]
        yield f
    owned = {f[2] for q in queues.values() for f in q}
    yield from (f for f in files if owner[f[2]] is None and f[2] not in keep and f[2] not in gone)
    yield from (f for f in files if f[2] in owned)


class DiskCap:
    """One folder's cap: swept every SWEEP_EVERY_S by a daemon thread, and on demand when an upload needs room.
    `used` is the folder's size at the last sweep plus the uploads admitted since."""

    def __init__(
        self,
        folder: Path | None = None,
        cap_bytes: int = DEFAULTS.disk_cap_bytes,
        age_s: float = 600.0,
        keep: Callable[[], Collection[str]] | None = None,
        address_of: Callable[[str], str | None] | None = None,
        share_bytes: int = 64 * MB,
    ) -> None:
        self.folder = folder
        self.cap_bytes = cap_bytes
        self.age_s = age_s
        self.keep = keep  # files no sweep deletes (Gradio's keep_in_cache, protected saved runs)
        self.address_of = address_of  # a file's owning address (app/server/file_owners.py): a flood loses its own first
        self.share_bytes = share_bytes
        self.used = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def sweep(self, room: int = 0) -> SweepResult:
        if self.folder is None:
            return SweepResult(0, 0, 0)
        with self._lock:
            result = sweep(
                self.folder,
                self.cap_bytes,
                self.age_s,
                room=room,
                keep=self.keep() if self.keep else (),
                address_of=self.address_of,
                share_bytes=self.share_bytes,
            )
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
        bytes_per_s: float = DEFAULTS.upload_bytes_per_s,
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


DISK = DiskCap()
RATE = UploadRate()
