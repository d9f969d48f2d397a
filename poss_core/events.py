"""The one seam between engine and views: a `RoundEvent` per draft-and-verify round, and a closing `DecodeSummary`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


def number(value: Any) -> float:
    """A float read back from JSON, where null stands for NaN (a value not observed, e.g. a draft probability that
    transformers' generate does not expose)."""
    return math.nan if value is None else float(value)


@dataclass
class DraftNode:
    """One drafted token of a round's tree. `parent` is a node index, or -1 for the root (last verified token)."""

    token: int
    parent: int
    depth: int
    score: float  # cumulative draft log-prob from the root
    draft_prob: float  # the draft's probability of this token given its parent
    specialist: int  # which draft specialist (layer group) proposed it

    @classmethod
    def of(cls, token, parent, depth, score, draft_prob, specialist) -> "DraftNode":
        """A node from JSON values (null score or probability: not observed, NaN)."""
        return cls(int(token), int(parent), int(depth), number(score), number(draft_prob), int(specialist))


@dataclass
class FeatureDeviation:
    """Distance between the draft's predicted feature and the target's true one at an accepted position."""

    l2: float
    cosine: float  # cosine distance, 1 - cos


@dataclass
class TreeDeviation:
    """Mean feature deviation of the `n` tree slots whose predicted feature drafted position k, on the accepted path
    (the root and accepted nodes: at most one slot per position) or off it (every other node with a feature)."""

    k: int
    on_path: bool
    l2: float
    cosine: float
    n: int = 1


@dataclass
class StartDeviation:
    """Mean feature deviation at position k of the chains the draft rolled forward from `n` positions of the
    target's continuation: every position a round covered (its root and the tokens it accepted), not only the root."""

    k: int
    l2: float
    cosine: float
    n: int = 1


@dataclass
class RoundEvent:
    """Everything one round did; plain decoding emits the same events with an empty tree."""

    round: int
    nodes: list[DraftNode]
    accepted: list[int]  # node indices along the accepted path, root excluded
    bonus: int  # the target's own token after the accepted path
    target_probs: list[float]  # the target's probability of each drafted node's token (same order as nodes)
    # One per accepted position, position 1 first: conditional on acceptance (survivor-biased; see below)
    feature_deviation: list[FeatureDeviation]
    draft_ms: float
    verify_ms: float
    new_tokens: int  # tokens produced so far, this round included
    tokens: list[int] = field(default_factory=list)  # token ids this round emitted (accepted + bonus, cut at stop)
    text: str = ""  # decoded text of `tokens`
    wall_ms: float = 0.0  # the whole round, including engine overhead
    prefill: bool = False  # the first round: the target reads the prompt and picks one token, nothing is drafted
    # Drafting milliseconds had the tree stopped at depth d (entry d-1), pruning included: measured marks inside
    # one tree build, so `--tree-budget auto` costs shallower trees from real rounds rather than by proportion.
    draft_ms_by_depth: list[float] = field(default_factory=list)
    # The target's probability of its own token `bonus` where acceptance stopped (None: not recorded, e.g. plain
    # decoding or a file saved before this field existed).
    bonus_prob: float | None = None
    # False for rounds of transformers' generate (prompt lookup, assisted): its streamer shows only the tokens each
    # target forward kept, so `nodes` are the accepted candidates alone (a chain, draft probabilities and scores NaN);
    # what was proposed and rejected, and how drafting and verifying split the round's time, are not observable.
    draft_observed: bool = True
    # Every drafted slot's deviation by position, on and off the accepted path (empty: no draft features)
    tree_deviation: list[TreeDeviation] = field(default_factory=list)
    # Positions 1..m along the target's own continuation from this round's root (continuation.py): filled in when
    # the decode ends, since it needs the tokens committed after this round
    continuation_deviation: list[FeatureDeviation] = field(default_factory=list)
    # Positions 1..m along the continuation from every position this round covered (its root and accepted tokens),
    # averaged over those starts: a sample of the text, where round roots are the places the last draft failed
    every_position_deviation: list[StartDeviation] = field(default_factory=list)

    @classmethod
    def target_only(cls, round: int, token: int, verify_ms: float, new_tokens: int, **more: Any) -> "RoundEvent":
        """A round in which nothing was drafted: the prefill, or a step of plain decoding (the target's one token)."""
        return cls(
            round=round,
            nodes=[],
            accepted=[],
            bonus=token,
            target_probs=[],
            feature_deviation=[],
            draft_ms=0.0,
            verify_ms=verify_ms,
            new_tokens=new_tokens,
            **more,
        )

    @property
    def accept_len(self) -> int:
        return len(self.accepted)

    @property
    def overhead_ms(self) -> float:
        return max(0.0, self.wall_ms - self.draft_ms - self.verify_ms)

    def to_json(self) -> dict[str, Any]:
        """The CLI's --jsonl object for this round."""
        return {
            "round": self.round,
            "nodes": [asdict(n) for n in self.nodes],
            "accepted": list(self.accepted),
            "bonus": self.bonus,
            "target_probs": list(self.target_probs),
            "feature_deviation": [asdict(d) for d in self.feature_deviation],
            "draft_ms": self.draft_ms,
            "verify_ms": self.verify_ms,
            "wall_ms": self.wall_ms,
            "new_tokens": self.new_tokens,
            "tokens": list(self.tokens),
            "text": self.text,
            "prefill": self.prefill,
            "draft_ms_by_depth": list(self.draft_ms_by_depth),
            "bonus_prob": self.bonus_prob,
            "draft_observed": self.draft_observed,
            "tree_deviation": [asdict(d) for d in self.tree_deviation],
            "continuation_deviation": [asdict(d) for d in self.continuation_deviation],
            "every_position_deviation": [asdict(d) for d in self.every_position_deviation],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "RoundEvent":
        """Rebuild an event from `to_json` output (saved runs are replayed without a model)."""
        return cls(
            round=int(obj["round"]),
            nodes=[DraftNode.of(**n) for n in obj.get("nodes", [])],
            accepted=[int(a) for a in obj.get("accepted", [])],
            bonus=int(obj["bonus"]),
            target_probs=[float(p) for p in obj.get("target_probs", [])],
            feature_deviation=[FeatureDeviation(**d) for d in obj.get("feature_deviation", [])],
            draft_ms=float(obj.get("draft_ms", 0.0)),
            verify_ms=float(obj.get("verify_ms", 0.0)),
            new_tokens=int(obj.get("new_tokens", 0)),
            tokens=[int(t) for t in obj.get("tokens", [])],
            text=str(obj.get("text", "")),
            wall_ms=float(obj.get("wall_ms", 0.0)),
            prefill=bool(obj.get("prefill", False)),
            draft_ms_by_depth=[float(m) for m in obj.get("draft_ms_by_depth", [])],
            bonus_prob=None if obj.get("bonus_prob") is None else float(obj["bonus_prob"]),
            draft_observed=bool(obj.get("draft_observed", True)),
            tree_deviation=[
                TreeDeviation(int(d["k"]), bool(d["on_path"]), float(d["l2"]), float(d["cosine"]), int(d.get("n", 1)))
                for d in obj.get("tree_deviation", [])
            ],
            continuation_deviation=[FeatureDeviation(**d) for d in obj.get("continuation_deviation", [])],
            every_position_deviation=[
                StartDeviation(int(d["k"]), float(d["l2"]), float(d["cosine"]), int(d.get("n", 1)))
                for d in obj.get("every_position_deviation", [])
            ],
        )


@dataclass
class DecodeSummary:
    """The last item a decoder yields: the whole text, why it stopped, and the statistics of its events."""

    text: str
    token_ids: list[int]
    stop_reason: str  # "eos" | "max_new_tokens" | "context_limit" | "cancelled"
    stats: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"summary": {**self.stats, "text": self.text, "stop_reason": self.stop_reason}}
