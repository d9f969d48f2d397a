""" "Everyone on this server": the round statistics of every finished live run on this server (every tab and API
client), pooled per preset, settings and method, at most `per_address` runs from one address (one visitor cannot
fill it). Runs at other settings (a temperature, a tree, a precision) pool apart from each other, so one visitor's
odd settings never skew the class's charts: a tab's charts show the group of its own run's settings, else the group
most runs used. Numbers only: a lane adds its `metrics.AcceptanceStats` (accept-length histogram by drafted depth,
specialists, feature deviation by position) and its token and time totals, never its prompt or text. Memory is
bounded: one entry per (preset, settings, method), at most MAX_KEYS of them, each a fixed-size table whatever the
number of runs; a new group past the cap takes the place of the group with the fewest runs. The pool is reset only
with the key the app was started with (`python app.py --class-reset-key`)."""

from __future__ import annotations

import hmac
import threading
import time
from dataclasses import dataclass
from typing import Any

from app.server.limits import DEFAULTS
from poss_core.rounds import metrics
from poss_core.rounds.metrics import AcceptanceStats
from poss_core.runtime.compare import Comparison

MAX_KEYS = 64  # (preset, settings, method) entries kept: the usual settings' groups and a few others

# The settings that change what the class charts measure (acceptance and speed); a run's length and seed do not.
POOLED_BY = ("temperature", "top_p", "depth", "top_k", "tree_budget", "precision", "quantization")
Settings = tuple[tuple[str, Any], ...]


def settings_of(spec: Any) -> Settings:
    """The settings a run pools by: an auto tree budget is "auto", top-p counts only when sampling."""
    values = {name: getattr(spec, name) for name in POOLED_BY}
    if getattr(spec, "auto_budget", False):
        values["tree_budget"] = "auto"
    if not values["temperature"]:
        values.pop("top_p")
    return tuple(values.items())


def describe(settings: Settings) -> str:
    """A group's settings in a chart note: "temperature 0, depth 6, top-k 8, 32 nodes, bf16"."""
    v = dict(settings)
    parts = [f"temperature {v['temperature']:g}"] + ([f"top-p {v['top_p']:g}"] if "top_p" in v else [])
    nodes = "auto tree" if v["tree_budget"] == "auto" else f"{v['tree_budget']} nodes"
    parts += [f"depth {v['depth']}", f"top-k {v['top_k']}", nodes, str(v["precision"])]
    return ", ".join(parts + ([str(v["quantization"])] if v["quantization"] not in ("auto", "none") else []))


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
    """Every finished live run's statistics on this server, per (preset, settings, method), behind one lock.
    `version` moves on each change, so a tab redraws the class charts only when something changed."""

    def __init__(
        self, reset_key: str | None = None, max_keys: int = MAX_KEYS, per_address: int = DEFAULTS.class_runs_per_address
    ) -> None:
        self.reset_key = reset_key or None
        self.max_keys = max_keys
        self.per_address = per_address
        self._by_address: dict[str, int] = {}  # address -> runs it pooled since the reset
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, Settings, str], ClassEntry] = {}
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
        group = (comp.spec.preset, settings_of(comp.spec))
        added = 0
        with self._lock:
            for lane, stats, tokens, seconds in parts:
                key = (*group, lane.method)
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries[key] = entry.added(stats, tokens, seconds)
                elif len(self._entries) < self.max_keys or self._make_room(group):
                    self._entries[key] = ClassEntry(lane.short, stats, 1, tokens, seconds)
                else:  # bounded: past the cap, with no smaller group to give way
                    continue
                added += 1
            if added:
                self.version += 1
        return added

    def _make_room(self, group: tuple[str, Settings]) -> bool:
        """Drop the group with the fewest runs (not `group` itself) to make room; False when there is none."""
        others: dict[tuple[str, Settings], int] = {}
        for (preset, settings, _), e in self._entries.items():
            if (preset, settings) != group:
                others[(preset, settings)] = max(others.get((preset, settings), 0), e.runs)
        if not others:
            return False
        smallest = min(others, key=others.get)
        for key in [k for k in self._entries if k[:2] == smallest]:
            del self._entries[key]
        return True

    def groups(self, preset: str) -> dict[Settings, int]:
        """The settings groups pooled on `preset`, each with its runs (its most-pooled lane's), most runs first."""
        with self._lock:
            found: dict[Settings, int] = {}
            for (p, settings, _), e in self._entries.items():
                if p == preset:
                    found[settings] = max(found.get(settings, 0), e.runs)
        return dict(sorted(found.items(), key=lambda kv: -kv[1]))

    def view(self, preset: str, settings: Settings | None = None) -> dict[str, ClassEntry]:
        """method -> its pooled entry on `preset` at `settings` (default: the group most runs used); a snapshot:
        entries are immutable."""
        if settings is None:
            settings = next(iter(self.groups(preset)), None)
        with self._lock:
            return {method: e for (p, s, method), e in self._entries.items() if p == preset and s == settings}

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
