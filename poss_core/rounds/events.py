"""The one seam between engine and views: a `RoundEvent` per draft-and-verify round, and a closing `DecodeSummary`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cache, partial
from operator import attrgetter
from types import NoneType, UnionType
from typing import Annotated, Any, ClassVar, get_args, get_origin, get_type_hints

# A float that is NaN where it was not observed (a draft probability that transformers' generate does not expose):
# JSON holds it as null.
MaybeNaN = Annotated[float, "NaN where not observed; null in JSON"]


def number(value: Any) -> float:
    """A float read back from JSON, where null stands for NaN (a value not observed)."""
    return math.nan if value is None else float(value)


@dataclass
class DraftNode:
    """One drafted token of a round's tree. `parent` is a node index, or -1 for the root (last verified token)."""

    token: int
    parent: int
    depth: int
    score: MaybeNaN  # cumulative draft log-prob from the root
    draft_prob: MaybeNaN  # the draft's probability of this token given its parent
    specialist: int  # which draft specialist (layer group) proposed it


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
    """Everything one round did; plain decoding emits the same events with an empty tree.

    This declaration is the only list of a round's fields: its JSON (`to_json`, `from_json`), the light copy the
    charts pool (views/pooling.py), the saved-run schema (saved_runs.py) and the benchmark's records
    (results/records.py) are read off it. A field added since the first has a default, which a round saved before
    it existed reads."""

    # What a round read from JSON must hold; any other field it lacks reads its default, or the empty value of its
    # type where it has none (no nodes, 0 ms: a round written by hand)
    REQUIRED_KEYS: ClassVar[tuple[str, ...]] = ("round", "bonus")

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
    # Tokens the target accepted in this round (its bonus included) past the answer's end (the end-of-turn token or
    # the token limit): cut from `accepted`, `tokens` and every count. Nonzero only in a last round that ended inside
    # its accepted path, whose bonus is then not emitted either.
    past_end: int = 0

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
    def emitted(self) -> int:
        """Tokens this round added to the answer: its accepted draft tokens and, unless the answer ended before it,
        the target's own token."""
        return self.accept_len + (0 if self.past_end else 1)

    @property
    def overhead_ms(self) -> float:
        return max(0.0, self.wall_ms - self.draft_ms - self.verify_ms)

    def to_json(self) -> dict[str, Any]:
        """The CLI's --jsonl object for this round: every field, a drafted node or a deviation as an object."""
        return to_json(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "RoundEvent":
        """Rebuild an event from `to_json` output (saved runs are replayed without a model)."""
        return from_json(cls, obj)


def to_json(value: Any, compact: bool = False) -> Any:
    """A dataclass of this module as JSON values: an object keyed by field name or, `compact`, an array of its fields
    in declared order (the benchmark's records); lists item by item, other values as they are (NaN too:
    json_safe.clean_json writes it as null)."""
    return _writer(type(value), compact)(value)


def field_writer(cls: type, name: str, compact: bool = False) -> Callable[[Any], Any]:
    """How a value of field `name` of dataclass `cls` is written as JSON (as `to_json` writes it)."""
    return _writer(_hints(cls)[name], compact)


def from_json(cls: type, obj: dict[str, Any] | list) -> Any:
    """A dataclass of this module from JSON: an object keyed by field name, or an array of its fields in declared
    order (`to_json(compact=True)`). Each value is read as its declared type; a field the object lacks reads
    `default_in_json` (KeyError names one it must hold)."""
    layout = _layout(cls)
    if isinstance(obj, (list, tuple)):
        if len(obj) == len(layout):
            return cls(*[read(v) for (_, read, _), v in zip(layout, obj)])
        obj = dict(zip((name for name, _, _ in layout), obj))
    values = {}
    for name, read, make in layout:
        if name in obj:
            values[name] = read(obj[name])
        elif make is None:
            raise KeyError(name)
        else:
            values[name] = make()
    return cls(**values)


def default_in_json(cls: type, name: str) -> Any:
    """What a JSON object of dataclass `cls` that lacks field `name` reads: its default, or MISSING where the object
    must hold it (a field without a default; in a round, only `RoundEvent.REQUIRED_KEYS`)."""
    make = next(make for field_name, _, make in _layout(cls) if field_name == name)
    return MISSING if make is None else make()


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=True)


@cache
def _layout(cls: type) -> tuple[tuple[str, Callable[[Any], Any], Callable[[], Any] | None], ...]:
    """Each field of `cls`: its name, how its JSON value is read, and what makes the value an object without it reads
    (None: the object must hold it; see `default_in_json`)."""
    hints = _hints(cls)
    required = getattr(cls, "REQUIRED_KEYS", None)
    out = []
    for f in fields(cls):
        if f.default is not MISSING:
            make = partial(_same, f.default)
        elif f.default_factory is not MISSING:
            make = f.default_factory
        elif required is None or f.name in required:
            make = None
        else:
            make = partial(_empty, hints[f.name])
        out.append((f.name, _reader(hints[f.name]), make))
    return tuple(out)


def _same(value: Any) -> Any:
    return value


def _empty(kind: Any) -> Any:
    """The empty value of a declared type: [], None for an optional value, else 0, 0.0, "" or False."""
    origin = get_origin(kind)
    if origin is list:
        return []
    if origin is Annotated:
        return _empty(get_args(kind)[0])
    if origin is UnionType:
        return None
    return kind()


@cache
def _reader(kind: Any) -> Callable[[Any], Any]:
    """How a JSON value of declared type `kind` is read: a list item by item, `X | None` as None or X, a dataclass by
    `from_json`, MaybeNaN by `number` (null: NaN), a plain type by calling it (int, float, bool, str)."""
    if kind == MaybeNaN:
        return number
    origin, args = get_origin(kind), get_args(kind)
    if origin is Annotated:
        return _reader(args[0])
    if origin is list:
        item = _reader(args[0])
        return lambda values: [item(v) for v in values]
    if origin is UnionType:
        (inner,) = [a for a in args if a is not NoneType]
        read = _reader(inner)
        return lambda value: None if value is None else read(value)
    if is_dataclass(kind):
        return partial(from_json, kind)
    return kind


@cache
def _writer(kind: Any, compact: bool) -> Callable[[Any], Any]:
    """How a value of declared type `kind` is written as JSON (see `to_json`): lists copied, dataclasses field by
    field, anything else as it is."""
    origin, args = get_origin(kind), get_args(kind)
    if origin is Annotated:
        return _writer(args[0], compact)
    if origin is list:
        item = _writer(args[0], compact)
        return list if item is _same else (lambda values: [item(v) for v in values])
    if origin is UnionType:
        (inner,) = [a for a in args if a is not NoneType]
        write = _writer(inner, compact)
        return _same if write is _same else (lambda value: None if value is None else write(value))
    if not is_dataclass(kind):
        return _same
    hints = _hints(kind)
    parts = tuple((f.name, _writer(hints[f.name], compact)) for f in fields(kind))
    names = tuple(name for name, _ in parts)
    if len(parts) > 1 and all(write is _same for _, write in parts):  # a node, a deviation: read them all at once
        values = attrgetter(*names)
        return (lambda v: list(values(v))) if compact else (lambda v: dict(zip(names, values(v))))
    if compact:
        return lambda v: [write(getattr(v, name)) for name, write in parts]
    return lambda v: {name: write(getattr(v, name)) for name, write in parts}


@dataclass
class DecodeSummary:
    """The last item a decoder yields: the whole text, why it stopped, and the statistics of its events."""

    text: str
    token_ids: list[int]
    stop_reason: str  # "eos" | "max_new_tokens" | "context_limit" | "cancelled"
    stats: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"summary": {**self.stats, "text": self.text, "stop_reason": self.stop_reason}}
