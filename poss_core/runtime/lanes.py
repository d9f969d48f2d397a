"""One lane of a comparison: one method's decode on the shared prompt, the texts of its tokens and nodes, and its
own clock (`spent_ms`, the time its rounds took; `ahead`, rounds decoded but not shown yet), which the race in
compare.py reads to decide which lane runs next and what each shows."""

from __future__ import annotations

import math
import sys
import traceback
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import PossError
from ..decoding.detokenizer import Detokenizer, TokenTexts
from ..rounds.events import DecodeSummary, RoundEvent
from ..rounds.token_records import TokenRecord, round_records
from . import methods
from .held_memory import NODE_BYTES, ROUND_BYTES, generator_tensor_bytes


@dataclass
class Lane:
    """One method's decode: its events, the text of each token, and where the next round comes from."""

    method: str
    label: str
    trained: bool = True  # False: a random stand-in draft (the registry's flag; the app shows a badge)
    events: list[RoundEvent] = field(default_factory=list)
    pieces: list[list[str]] = field(default_factory=list)  # per round: each emitted token's text in context
    node_texts: list[list[str]] = field(default_factory=list)  # per round: each drafted node's own text
    bonus_texts: list[str] = field(default_factory=list)
    records: list[TokenRecord] = field(default_factory=list)
    summary: dict[str, Any] | None = None  # {"text", "stop_reason", "stats"} once finished
    error: str | None = None
    special_ids: set[int] = field(default_factory=set)
    tree_budget: int | None = None  # the tree budget this lane decodes with: the root and up to tree_budget - 1 nodes
    budget_auto: bool = False  # chosen by `auto` for this machine
    depth_stop: float = 0.0  # the dynamic depth stop `auto` chose (0: every round drafts the full depth)
    source: Iterator | None = None  # the decoder's generator, or a replay of saved rounds
    detok: Detokenizer | None = None
    token_text: TokenTexts | None = None
    # The race (Comparison.race): items decoded but not shown yet, each with its end on the lane's own clock, and
    # the lane's own time over every round decoded (shown or ahead)
    ahead: deque = field(default_factory=deque)
    spent_ms: float = 0.0
    decoded_all: bool = False  # the source has ended: every item is shown or ahead
    speedup_at_end: float | None = None  # the speed-up over plain decoding, frozen when the lane finished

    @property
    def plain(self) -> bool:
        return self.method == methods.PLAIN

    @property
    def short(self) -> str:
        """The lane's name in titles and chart legends ("POSS-2"); the label for a method the registry does not know."""
        return methods.short_of(self.method) if methods.color_of(self.method) else self.label

    @property
    def finished(self) -> bool:
        return self.summary is not None or self.error is not None

    @property
    def token_ids(self) -> list[int]:
        return [t for e in self.events for t in e.tokens]

    def held_bytes(self, tensors: bool = True) -> int:
        """An estimate of the memory this lane holds: its rounds (ROUND_BYTES each, NODE_BYTES per drafted node) and,
        with `tensors`, those its open decoder keeps between rounds (its KV caches and the draft's state, by the
        sizes of their storages; a replay's source holds none worth walking)."""
        counted = getattr(self, "_counted", (0, 0))  # (rounds, nodes) counted so far: events are only appended
        if counted[0] != len(self.events):
            counted = (len(self.events), counted[1] + sum(len(e.nodes) for e in self.events[counted[0] :]))
            self._counted = counted
        live = generator_tensor_bytes(self.source) if tensors else 0
        return ROUND_BYTES * counted[0] + NODE_BYTES * counted[1] + live

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events)

    @property
    def stop_reason(self) -> str | None:
        return self.summary["stop_reason"] if self.summary else None

    def add(self, event: RoundEvent, pieces: list[str], node_texts: list[str], bonus_text: str) -> None:
        self.events.append(event)
        self.pieces.append(pieces)
        self.node_texts.append(node_texts)
        self.bonus_texts.append(bonus_text)
        self.records.extend(round_records(event, pieces, node_texts, self.special_ids))

    def take(self, item) -> None:
        """Record one item from the source: a live event, a replayed (event, texts) tuple, the summary, or the end
        of a source that ended without one."""
        if item is _ENDED:
            if self.summary is None:
                self.summary = {"text": self.text, "stop_reason": "cancelled", "stats": {}}
        elif isinstance(item, DecodeSummary):
            self.summary = {"text": item.text, "stop_reason": item.stop_reason, "stats": item.stats}
        elif isinstance(item, RoundEvent):
            # Special tokens (EOS, ...) are shown by name, small; the text view leaves them out.
            pieces = [self.token_text(t) if t in self.special_ids else self.detok.push([t]) for t in item.tokens]
            labels = [self.token_text(n.token) for n in item.nodes]
            self.add(item, pieces, labels, self.token_text(item.bonus))
        elif isinstance(item, tuple):
            self.add(*item)
        elif isinstance(item, dict):
            self.summary = item

    @property
    def decoding(self) -> bool:
        """Whether the lane still has items to decode."""
        return not (self.decoded_all or self.finished or self.source is None)

    def decode(self) -> None:
        """Pull the source's next item (a round, or the closing summary) into `ahead`, at its end on the lane's own
        clock. An error is shown at once, after what was decoded before it."""
        if not self.decoding:
            return
        try:
            item = next(self.source)
        except StopIteration:
            item = _ENDED
        except PossError as err:
            self._fail(str(err))
            return
        except Exception as err:  # a bug or a device error: the lane stops with a message, the app keeps serving
            traceback.print_exc(file=sys.stderr)
            self._fail(f"{type(err).__name__}: {err}")
            return
        self.spent_ms += _item_ms(item)
        self.ahead.append((self.spent_ms, item))
        self.decoded_all = item is _ENDED or isinstance(item, (DecodeSummary, dict))

    def _fail(self, message: str) -> None:
        self.show_until(math.inf)
        self.error = message
        self.decoded_all = True

    def show_until(self, clock_ms: float) -> bool:
        """Show every decoded item that ends by `clock_ms` on the lane's own clock; True if any was shown."""
        shown = False
        while self.ahead and self.ahead[0][0] <= clock_ms:
            self.take(self.ahead.popleft()[1])
            shown = True
        return shown

    def advance(self) -> bool:
        """Run one round and show it; False once the lane has finished (summary, error, or an exhausted source)."""
        self.decode()
        self.show_until(math.inf)
        return not self.finished

    def close(self) -> None:
        if self.source is not None and hasattr(self.source, "close"):
            try:
                self.source.close()
            except Exception:  # noqa: BLE001 - closing a broken generator must not hide the real error
                pass
        self.source = None


_ENDED = object()  # what a lane's `ahead` holds for a source that ended without a summary


def _item_ms(item) -> float:
    """The lane's own time an item from its source took: a round's wall time (a replayed round's as recorded)."""
    event = item[0] if isinstance(item, tuple) else item
    return event.wall_ms if isinstance(event, RoundEvent) else 0.0
