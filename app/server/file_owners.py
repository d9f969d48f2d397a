"""Who owns each file the app keeps in Gradio's cache, and which files no sweep may delete.

- An upload belongs to the client address that sent it; a saved run to the tab (session) that saved it and to its
  address.
- A saved run is *protected* while its tab lives (it was active within the idle time) and for `keep_s` after that,
  and never less than `keep_s` after it was saved: the disk sweep, Gradio's own cache sweep and other visitors' saves,
  loads and uploads cannot delete it. A tab keeps its newest `per_tab` saved runs, and an address at most
  `per_address_bytes` of protected saves (past that its oldest saves are owned files like any other), so protection
  cannot fill the disk.
- When the disk is short, `disk_cap.sweep` deletes by owner: the owner past its share first, then unowned files,
  then the oldest owned ones; protected files never.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from app.server.limits import DEFAULTS, MB

SAVED_RUNS_PER_TAB = 4  # the newest saved runs a tab keeps; its older ones go when it saves again
PROTECTED_PER_ADDRESS = 64 * MB  # protected saved runs per address (four of the largest)


@dataclass
class Owned:
    address: str  # the client address that sent or saved it
    size: int
    since: float  # time.monotonic() when it was written
    tab: str | None = None  # the tab that saved it (saved runs only)
    real: str = ""  # the path with links resolved: the disk sweep walks the resolved folder


class FileOwners:
    """Files by path: their owners, and which saved runs are protected now."""

    def __init__(
        self,
        keep_s: float = DEFAULTS.saved_run_s,
        per_tab: int = SAVED_RUNS_PER_TAB,
        per_address_bytes: int = PROTECTED_PER_ADDRESS,
        tab_seen: Callable[[str], float | None] | None = None,
        idle_s: Callable[[], float] | None = None,
        max_files: int = 100_000,
    ) -> None:
        self.keep_s = keep_s
        self.per_tab = per_tab
        self.per_address_bytes = per_address_bytes
        self.tab_seen = tab_seen  # tab -> when it was last active (time.monotonic()), None once gone
        self.idle_s = idle_s  # how long an inactive tab still lives (the session store's idle time)
        self.max_files = max_files
        self._files: dict[str, Owned] = {}  # by the path as written (Gradio's form)
        self._real: dict[str, str] = {}  # resolved path -> the path as written
        self._lock = threading.Lock()

    def upload(self, path: str, address: str, size: int) -> None:
        """An uploaded file of `address`."""
        self._add(path, Owned(address, size, time.monotonic()))

    def saved(self, path: str, tab: str, address: str, size: int) -> list[str]:
        """A saved run of `tab`; returns the tab's older saved runs past `per_tab`, which the caller deletes."""
        self._add(path, Owned(address, size, time.monotonic(), tab))
        with self._lock:
            mine = sorted((o.since, p) for p, o in self._files.items() if o.tab == tab)
            return [p for _, p in mine[: max(0, len(mine) - self.per_tab)]]

    def _add(self, path: str, owned: Owned) -> None:
        path = os.path.abspath(path)
        owned.real = os.path.realpath(path)
        with self._lock:
            self._files[path] = owned
            self._real[owned.real] = path
            if len(self._files) > self.max_files:  # a file forgotten by now was deleted long ago
                self._drop(min(self._files, key=lambda p: self._files[p].since))

    def _drop(self, path: str) -> None:
        owned = self._files.pop(path, None)
        if owned is not None:
            self._real.pop(owned.real, None)

    def forget(self, path: str) -> None:
        with self._lock:
            self._drop(self._real.get(path, os.path.abspath(path)))

    def address_of(self, path: str) -> str | None:
        """The address that owns `path` (as written or resolved), None for a file of no one's."""
        with self._lock:
            owned = self._files.get(path) or self._files.get(self._real.get(path, ""))
        return owned.address if owned else None

    def _keep_until(self, owned: Owned) -> float:
        """When a saved run stops being protected: `keep_s` after its tab was last active (a live tab counts as
        active until the idle time has passed), and never sooner than `keep_s` after it was saved."""
        seen = self.tab_seen(owned.tab) if self.tab_seen and owned.tab else None
        alive_until = (seen + (self.idle_s() if self.idle_s else 0.0)) if seen is not None else owned.since
        return max(owned.since, alive_until) + self.keep_s

    def protected(self, now: float | None = None) -> set[str]:
        """The saved runs no sweep may delete now, each as written and resolved: each address's newest saves
        within their keep time, at most `per_address_bytes` of them."""
        now = time.monotonic() if now is None else now
        with self._lock:
            saves = sorted(((o.since, p, o) for p, o in self._files.items() if o.tab), reverse=True)
        held: dict[str, int] = {}
        keep = set()
        for _, path, owned in saves:
            if now >= self._keep_until(owned):
                continue
            if held.get(owned.address, 0) + owned.size > self.per_address_bytes:
                continue
            held[owned.address] = held.get(owned.address, 0) + owned.size
            keep.update((path, owned.real))
        return keep

    def __len__(self) -> int:
        return len(self._files)


OWNERS = FileOwners()


class KeepInCache:
    """A component's `keep_in_cache` as Gradio's own cache sweep reads it (it only adds and iterates): the files
    Gradio keeps for good, plus the saved runs protected now."""

    def __init__(self, kept: set[str] | None = None, owners: FileOwners | None = None) -> None:
        self.kept = set(kept or ())
        self.owners = OWNERS if owners is None else owners

    def add(self, path: str) -> None:
        self.kept.add(path)

    def __iter__(self) -> Iterator[str]:
        return iter(self.kept | self.owners.protected())

    def __contains__(self, path: object) -> bool:
        return path in self.kept or path in self.owners.protected()

    def __len__(self) -> int:
        return len(self.kept | self.owners.protected())
