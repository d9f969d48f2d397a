"""Rounds as the charts pool them: a light copy of a round (what aggregation and "All my runs" keep), and several
decodes' rounds as one stream (what the app's pooled charts and the benchmark's tables both draw)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from ..rounds import metrics
from ..rounds.events import RoundEvent


def light_event(e: RoundEvent) -> RoundEvent:
    """A round as aggregation keeps it: acceptance, deviations, timings, emitted tokens, and of the tree only the
    accepted path (first, so `accepted` is 0..accept_len-1) plus the first drafted node of every other depth (so the
    drafted depth and which specialist drafted each position stay known). Parents are re-indexed within the kept
    nodes (-1 when the parent was not kept)."""
    keep = list(e.accepted)
    depths = {e.nodes[a].depth for a in keep}
    for i, n in enumerate(e.nodes):
        if n.depth not in depths:
            depths.add(n.depth)
            keep.append(i)
    remap = {old: new for new, old in enumerate(keep)}
    nodes = [replace(e.nodes[i], parent=remap.get(e.nodes[i].parent, -1)) for i in keep]
    probs = [e.target_probs[i] for i in keep] if len(e.target_probs) == len(e.nodes) else []
    return replace(e, nodes=nodes, accepted=list(range(len(e.accepted))), target_probs=probs, text="")


def pool_events(turns: Iterable[Sequence[RoundEvent]]) -> list[RoundEvent]:
    """Concatenate several decodes' events into one stream whose `new_tokens` keeps counting, so that
    `metrics.tokens_per_s` of the pool is total new tokens over total wall time."""
    out: list[RoundEvent] = []
    offset = 0
    for events in turns:
        for e in events:
            out.append(_renumbered(e, len(out), offset + e.new_tokens))
        offset += metrics.total_new_tokens(list(events))
    return out


def _renumbered(e: RoundEvent, round_: int, new_tokens: int) -> RoundEvent:
    """`replace(e, round=..., new_tokens=...)` without re-running the dataclass's __init__ over every field: pooling
    copies each round several times (per run, per dataset, overall), so this is most of an evidence load's work."""
    out = object.__new__(RoundEvent)
    out.__dict__.update(e.__dict__)
    out.round, out.new_tokens = round_, new_tokens
    return out
