"""What each emitted token of a round was, for the app's token view: an accepted draft token (its position,
specialist and probabilities), the target's bonus or corrected token with the candidates it turned down, a prefill
or plain token."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .events import RoundEvent


@dataclass
class Rejected:
    """A drafted candidate the target turned down, at the position where the round's accepted path ended."""

    text: str
    draft_prob: float
    target_prob: float


@dataclass
class TokenRecord:
    """One emitted token and where it came from."""

    text: str
    round: int
    source: str  # "draft" (accepted draft token) | "bonus" | "corrected" | "prefill" | "plain"
    position: int = 0  # draft position 1..depth for accepted draft tokens; the position it filled for target tokens
    specialist: int | None = None
    draft_prob: float | None = None
    target_prob: float | None = None
    special: bool = False  # EOS and other special tokens: shown as a marker, not as text
    rejected: list[Rejected] = field(default_factory=list)

    @property
    def from_draft(self) -> bool:
        return self.source == "draft"


def rejected_at_end(event: RoundEvent, labels: list[str]) -> list[Rejected]:
    """The drafted children of the last accepted node (or the root) that the target rejected, best draft score first."""
    parent = event.accepted[-1] if event.accepted else -1
    kids = [i for i, n in enumerate(event.nodes) if n.parent == parent]
    kids.sort(key=lambda i: -event.nodes[i].score)
    return [
        Rejected(
            labels[i] if i < len(labels) else str(event.nodes[i].token),
            event.nodes[i].draft_prob,
            event.target_probs[i] if i < len(event.target_probs) else math.nan,
        )
        for i in kids
    ]


def round_records(
    event: RoundEvent, pieces: list[str], labels: list[str], special_ids: set[int] | frozenset[int] = frozenset()
) -> list[TokenRecord]:
    """The records of a round's emitted tokens: accepted draft tokens first, then the target's token.

    `pieces` is each emitted token's text in context, `labels` each drafted node's own text (for rejected tokens)."""
    out = []
    k = event.accept_len
    for i, tok in enumerate(event.tokens):
        text = pieces[i] if i < len(pieces) else ""
        special = tok in special_ids
        if i < k:
            a = event.accepted[i]
            node = event.nodes[a]
            seen = event.draft_observed  # transformers' generate shows accepted candidates, not who drafted them how
            out.append(
                TokenRecord(
                    text,
                    event.round,
                    "draft",
                    i + 1,
                    node.specialist if seen else None,
                    node.draft_prob if seen else None,
                    event.target_probs[a] if a < len(event.target_probs) else None,
                    special,
                )
            )
        elif event.prefill:
            out.append(TokenRecord(text, event.round, "prefill", special=special))
        elif not event.nodes:
            out.append(TokenRecord(text, event.round, "plain", special=special))
        else:
            rejected = rejected_at_end(event, labels)
            out.append(
                TokenRecord(
                    text, event.round, "corrected" if rejected else "bonus", k + 1, special=special, rejected=rejected
                )
            )
    return out
