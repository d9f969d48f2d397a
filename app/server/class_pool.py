""" "Everyone on this server": the round statistics of every finished live run on this server (every tab and API
client), pooled per preset and method, at most `per_address` runs from one address (one visitor cannot fill it).
Numbers only: a lane adds its `metrics.AcceptanceStats` (accept-length histogram by drafted depth, specialists,
feature deviation by position) and its token and time totals, never its prompt or text. Memory is bounded: one entry
per (preset, method), at most MAX_KEYS of them, each a fixed-size table whatever the number of runs. The pool is
reset only with the key the app was started with (`python app.py --class-reset-key`)."""

from __future__ import annotations

import hmac
import threading
import time
from dataclasses import dataclass

from app.server.limits import DEFAULTS
from poss_core.rounds import metrics
from poss_core.rounds.metrics import AcceptanceStats
from poss_core.runtime.compare import Comparison

MAX_KEYS = 64  # (preset, method) pairs kept; presets times their methods are far fewer


@dataclass(frozen=True)
class ClassEntry:
    """One method's pooled statistics on one preset: never changed in place (`added` returns a new one), so a
    repaint reads it without the lock."""

    label: str  # the method's short name (chart legends)
    stats: AcceptanceStats
    runs: int = 0
    tokens: int = 0
    seconds: float = 0.0  # the lanes' own compute time, summed (tokens / seconds: pooled tokens/s)

    def added(self, stats: AcceptanceStats, tokens: int, seconds: float) -> "ClassEntry":
        return ClassEntry(
            self.label, metrics.pooled([self.stats, stats]), self.runs + 1, self.tokens + tokens, self.seconds + seconds
        )

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


class ClassPool:
    """Every finished live run's statistics on this server, per (preset, method), behind one lock. `version` moves
    on each change, so a tab redraws the class charts only when something changed."""

    def __init__(
        self, reset_key: str | None = None, max_keys: int = MAX_KEYS, per_address: int = DEFAULTS.class_runs_per_address
    ) -> None:
        self.reset_key = reset_key or None
        self.max_keys = max_keys
        self.per_address = per_address
        self._by_address: dict[str, int] = {}  # address -> runs it pooled since the reset
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], ClassEntry] = {}
        self.version = 0
        self.since = time.time()

    def add_run(self, comp: Comparison | None, address: str | None = None) -> int:
        """Pool each lane of a live run from `address` that has rounds (a replay or a loaded file adds nothing: it
        repeats a run, or is not one of this server's; a run past its address's share is left out); returns how many
        lanes went in."""
        if comp is None or comp.replay:
            return 0
        who = address or "?"
        with self._lock:
            if self._by_address.get(who, 0) >= self.per_address:
                return 0
            self._by_address[who] = self._by_address.get(who, 0) + 1
        parts = [
            (
                lane,
                metrics.acceptance_stats(lane.events, int(comp.spec.depth)),
                metrics.total_new_tokens(lane.events),
                metrics.wall_seconds(lane.events),
            )
            for lane in comp.lanes
            if lane.events
        ]
        added = 0
        with self._lock:
            for lane, stats, tokens, seconds in parts:
                key = (comp.spec.preset, lane.method)
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries[key] = entry.added(stats, tokens, seconds)
                elif len(self._entries) < self.max_keys:  # bounded: a pair past the cap is not pooled
                    self._entries[key] = ClassEntry(lane.short, stats, 1, tokens, seconds)
                else:
                    continue
                added += 1
            if added:
                self.version += 1
        return added

    def view(self, preset: str) -> dict[str, ClassEntry]:
        """method -> its pooled entry on `preset` (a snapshot: entries are immutable)."""
        with self._lock:
            return {method: e for (p, method), e in self._entries.items() if p == preset}

    def runs(self) -> int:
        """Live runs pooled, counted by their most-pooled lane per preset."""
        with self._lock:
            by_preset: dict[str, int] = {}
            for (preset, _), e in self._entries.items():
                by_preset[preset] = max(by_preset.get(preset, 0), e.runs)
            return sum(by_preset.values())

    def reset(self, key: str | None) -> tuple[bool, str]:
        """Empty the pool if `key` is the one the app was started with; (done, what to tell the user)."""
        if not self.reset_key:
            return False, (
                "This server was started without --class-reset-key, so its class pool cannot be reset "
                "(restarting the app empties it)."
            )
        if not hmac.compare_digest(str(key or "").encode(), self.reset_key.encode()):
            return False, "That is not this server's reset key: the class pool was kept."
        with self._lock:
            runs = sum(e.runs for e in self._entries.values())
            self._entries.clear()
            self._by_address.clear()
            self.version += 1
            self.since = time.time()
        return True, f"The class pool was reset ({runs} lane run{'s' if runs != 1 else ''} dropped)."

    def __len__(self) -> int:
        return len(self._entries)


CLASS = ClassPool()
