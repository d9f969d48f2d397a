""" "All my runs": each tab's rounds of every run it decoded, pooled per preset and method, light (no token ids) and
capped, never changed once built so a repaint can read a pool while a handler adds a run."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from poss_core.rounds.events import RoundEvent
from poss_core.runtime.compare import Comparison, Lane
from poss_core.views.pooling import light_event, pool_events

# "All my runs" keeps at most this many rounds per preset and method in a tab, the oldest dropped first. A pooled
# round is light (the accepted path and one node per other depth, no token ids): about 0.8 KB at depth 6, so a full
# method pool is about 2.5 MB (docs/architecture.md, "Limits a public app needs", says how this was measured).
POOL_ROUNDS = 3000
POOLED_ROUND_BYTES = 850  # a pooled round's memory, rounded up from the 816 bytes measured (see POOL_ROUNDS)


@dataclass
class PooledRun:
    """One run's rounds of one method as "All my runs" keeps them, and the settings that shaped them."""

    events: list[RoundEvent]
    settings: dict[str, Any]


def pooled_event(e: RoundEvent) -> RoundEvent:
    """A round as the pool keeps it: the benchmark's light event (the accepted path and one node per other depth),
    without token ids or per-depth marks, which no chart reads."""
    return replace(light_event(e), tokens=[], draft_ms_by_depth=[])


def lane_settings(comp: Comparison, lane: Lane) -> dict[str, Any]:
    """The settings that move a lane's acceptance and speed (the prompt and seed are meant to vary)."""
    s = comp.spec
    out: dict[str, Any] = {
        "precision": comp.hardware.get("dtype") or s.precision,
        "quantization": s.quantization,
        "temperature": s.temperature,
        "top-p": s.top_p,
    }
    if not lane.plain:
        out.update(
            {
                "depth": s.depth,
                "top-k": s.top_k,
                "depth stop": lane.depth_stop,
                "tree budget": lane.tree_budget if lane.tree_budget is not None else s.tree_budget,
            }
        )
    return out


@dataclass
class MethodPool:
    """One method's rounds over the runs a tab decoded on one preset, the oldest first, at most `POOL_ROUNDS` of
    them. A pool is never changed once built (`added` returns a new one), so a repaint can read it while a handler
    adds a run."""

    label: str  # the method's short name (chart legends)
    runs: tuple[PooledRun, ...] = ()
    dropped: int = 0  # rounds dropped past the cap, oldest first

    @property
    def rounds(self) -> int:
        return sum(len(r.events) for r in self.runs)

    def added(self, run: PooledRun, cap: int | None = None) -> "MethodPool":
        """This pool with `run` last, its oldest rounds dropped past `cap` (POOL_ROUNDS by default). A run cut
        short keeps counting its new tokens from the first round it keeps."""
        runs, dropped = list(self.runs) + [run], self.dropped
        excess = sum(len(r.events) for r in runs) - (POOL_ROUNDS if cap is None else cap)
        while excess > 0:
            first = runs[0]
            if len(first.events) <= excess:
                runs.pop(0)
                cut = len(first.events)
            else:
                base = first.events[excess - 1].new_tokens
                runs[0] = PooledRun(
                    [replace(e, new_tokens=e.new_tokens - base) for e in first.events[excess:]], first.settings
                )
                cut = excess
            excess, dropped = excess - cut, dropped + cut
        return MethodPool(self.label, tuple(runs), dropped)

    def events(self) -> list[RoundEvent]:
        """Every kept round as one stream whose `new_tokens` counts on across runs: what the charts take (built on
        each call, not kept: a second copy of every round would double the pool's memory)."""
        return pool_events(r.events for r in self.runs)

    def varied(self) -> list[str]:
        """The settings that differ between the pooled runs (in the order `lane_settings` lists them)."""
        if not self.runs:
            return []
        keys = list(self.runs[0].settings)
        return [k for k in keys if len({repr(r.settings.get(k)) for r in self.runs}) > 1]


Pools = dict[str, MethodPool]  # method name -> its pool


def pooled_runs(comp: Comparison, light: bool) -> list[tuple[Lane, PooledRun]]:
    """Each lane with rounds, and its rounds as a pooled run (`light`: as the pool keeps them)."""
    return [
        (
            lane,
            PooledRun(
                [pooled_event(e) for e in lane.events] if light else list(lane.events), lane_settings(comp, lane)
            ),
        )
        for lane in comp.lanes
        if lane.events
    ]
