"""Saved comparisons: every lane's events as JSONL plus the settings, loaded back and replayed without a model.

Format (one JSON object per line):
    {"type": "run", "version": 1, "settings": {...RunSpec}, "hardware": {...},
     "lanes": [{"method", "label", "trained", "special_ids", ...}]}
    {"type": "event", "lane": i, "event": RoundEvent.to_json(), "pieces": [...], "node_texts": [...], "bonus_text": s}
    {"type": "summary", "lane": i, "text": ..., "stop_reason": ..., "stats": {...}, "error": null}
Token texts are stored with the events, so a replay needs no tokenizer. A name ending in .gz is gzip-compressed (the
bundled example recordings).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from ..base import settings
from ..base.errors import PossError
from ..base.json_safe import clean_json
from ..base.settings import BOUNDS
from ..decoding.config import MAX_PROMPT_CHARS, MAX_PROMPT_TOKENS
from ..rounds.events import (
    DraftNode,
    FeatureDeviation,
    MaybeNaN,
    RoundEvent,
    StartDeviation,
    TreeDeviation,
    default_in_json,
)
from .call_cap import CallCap
from .compare import Comparison
from .lanes import Lane
from .run_spec import MAX_LANES, RunSpec

VERSION = 1

# What a saved run may hold. A file is checked against these before anything in a session changes: each bounds the
# work a replay and its drawing do (tree sizes, depths, specialists, rounds) or the memory a loaded run holds.
MAX_RUN_BYTES = 16 * 1024 * 1024  # also the app's upload limit (launch's max_file_size)
MAX_DEPTH = int(BOUNDS["depth"][1])
MAX_NODES = int(BOUNDS["tree_budget"][1]) - 1  # the root is not a node
MAX_ROUNDS = int(BOUNDS["max_new_tokens"][1]) + 1  # every round emits a token; the prefill is round 0
MAX_TOKEN_ID = 2**31 - 1
MAX_PIECE_CHARS = 1024  # one token's text
MAX_TEXT_CHARS = 256 * 1024  # a lane's whole text
MAX_STATS_CHARS = 64 * 1024  # a lane's summary statistics, as JSON

TOKEN_ID = dict(ge=0, le=MAX_TOKEN_ID)
MS = dict(ge=0.0, le=1e9)
PROB = dict(ge=0.0, le=1.0 + 1e-3)  # a probability, with room for rounding
DEVIATION = {"l2": dict(ge=0.0), "cosine": dict(ge=0.0, le=2.0)}

Name = Annotated[str, Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9_.:/+-]+$")]
Label = Annotated[str, Field(max_length=120, pattern=r"^[^<>]*$")]
Piece = Annotated[str, Field(max_length=MAX_PIECE_CHARS)]
TokenId = Annotated[int, Field(**TOKEN_ID)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class _Message(_Model):
    role: Annotated[str, Field(max_length=32)]
    content: Annotated[str, Field(max_length=MAX_PROMPT_CHARS)]


def _setting(name: str, optional: bool = False) -> Any:
    """A setting of the table as a saved value, checked by the table's own `Setting.check` (its type, bounds or
    choices; the ConfigError says what is valid); `optional`: null allowed too."""
    check = settings.SETTINGS[name].check
    return Annotated[Any, BeforeValidator(lambda v: None if optional and v is None else check(v))]


class _SettingsBase(_Model):
    prompt: Annotated[str, Field(max_length=MAX_PROMPT_CHARS)] | Annotated[list[_Message], Field(max_length=256)]
    methods: Annotated[list[Name], Field(min_length=1, max_length=MAX_LANES)]
    preset: Name

    @field_validator("prompt")
    @classmethod
    def _total_length(cls, v):
        if isinstance(v, list) and sum(len(m.content) for m in v) > MAX_PROMPT_CHARS:
            raise ValueError(f"the conversation is longer than {MAX_PROMPT_CHARS} characters")
        return v


# The saved settings: the prompt, methods and preset, then every run setting of the table (settings.RUN).
# A setting a run was saved without reads its default.
_Settings = create_model(
    "_Settings",
    __base__=_SettingsBase,
    **{name: (_setting(name), settings.SETTINGS[name].default) for name in settings.RUN},
)


class _LaneHead(_Model):
    method: Name
    label: Label | None = None
    trained: bool  # False: a random stand-in draft
    special_ids: Annotated[list[TokenId], Field(max_length=4096)] = []
    budget: _setting("tree_budget", optional=True) = None  # the lane's tree budget (`Lane.tree_budget`)
    budget_auto: bool = False


class _Head(_Model):
    type: Literal["run"]
    version: Literal[1]
    settings: _Settings
    lanes: Annotated[list[_LaneHead], Field(min_length=1, max_length=MAX_LANES)]
    hardware: Annotated[
        dict[Annotated[str, Field(max_length=40)], Annotated[str, Field(max_length=200)]], Field(max_length=16)
    ] = {}
    prompt_tokens: Annotated[int, Field(ge=0, le=MAX_PROMPT_TOKENS)] = 0


# What a saved round may hold, field by field (pydantic's Field keywords): a number's range, a list's or a string's
# length and, under "each", the bounds of a list's items. The fields themselves, their types and their defaults are
# read off the dataclasses in events.py (`_saved_model`); a field not named here is held to the widest bounds a round
# has (`_WIDEST`), so a new field is checked, saved and loaded as declared with no edit here.
_BOUNDS: dict[type, dict[str, dict[str, Any]]] = {
    RoundEvent: {
        "round": dict(ge=0, le=MAX_ROUNDS),
        "nodes": dict(max_length=MAX_NODES),
        "accepted": dict(max_length=MAX_DEPTH, each=dict(ge=0, lt=MAX_NODES)),
        "bonus": TOKEN_ID,
        "target_probs": dict(max_length=MAX_NODES, each=PROB),
        "feature_deviation": dict(max_length=MAX_DEPTH),
        "draft_ms": MS,
        "verify_ms": MS,
        "wall_ms": MS,
        "new_tokens": dict(ge=0, le=MAX_ROUNDS * (MAX_DEPTH + 1)),
        "tokens": dict(max_length=MAX_DEPTH + 1, each=TOKEN_ID),
        "text": dict(max_length=(MAX_DEPTH + 1) * MAX_PIECE_CHARS),
        "draft_ms_by_depth": dict(max_length=MAX_DEPTH, each=MS),
        "bonus_prob": PROB,
        "tree_deviation": dict(max_length=2 * MAX_DEPTH),
        "continuation_deviation": dict(max_length=MAX_DEPTH),
        "every_position_deviation": dict(max_length=MAX_DEPTH),
    },
    DraftNode: {
        "token": TOKEN_ID,
        "parent": dict(ge=-1, lt=MAX_NODES),
        "depth": dict(ge=1, le=MAX_DEPTH),
        "score": dict(le=1e-3),  # a cumulative log-probability
        "draft_prob": PROB,
        "specialist": dict(ge=0, lt=MAX_DEPTH),
    },
    FeatureDeviation: DEVIATION,
    TreeDeviation: {**DEVIATION, "k": dict(ge=1, le=MAX_DEPTH), "n": dict(ge=1, le=MAX_NODES)},
    # a round covers its root and at most depth accepted tokens
    StartDeviation: {**DEVIATION, "k": dict(ge=1, le=MAX_DEPTH), "n": dict(ge=1, le=MAX_DEPTH + 1)},
}
_WIDEST: dict[type, dict[str, Any]] = {
    list: dict(max_length=MAX_NODES),
    str: dict(max_length=(MAX_DEPTH + 1) * MAX_PIECE_CHARS),
    int: dict(ge=-MAX_TOKEN_ID - 1, le=MAX_TOKEN_ID),
}


def _saved_type(kind: Any, bounds: dict[str, Any]) -> Any:
    """The pydantic type a saved value of declared type `kind` is checked as, within `bounds` (else `_WIDEST`)."""
    bounds = dict(bounds)
    each = bounds.pop("each", {})
    if kind == MaybeNaN:  # null where not observed
        return Annotated[float, Field(**bounds)] | None
    origin, args = get_origin(kind), get_args(kind)
    if origin is Annotated:
        return _saved_type(args[0], bounds)
    if origin is list:
        return Annotated[list[_saved_type(args[0], each)], Field(**(bounds or _WIDEST[list]))]
    if origin is UnionType:  # `X | None`
        (inner,) = [a for a in args if a is not NoneType]
        return _saved_type(inner, bounds) | None
    if is_dataclass(kind):
        return _saved_model(kind)
    return Annotated[kind, Field(**(bounds or _WIDEST.get(kind, {})))]


@cache
def _saved_model(cls: type) -> type[_Model]:
    """The model a saved dataclass of events.py is checked against: its fields, each as `_saved_type`, and what a
    file without one reads (`events.default_in_json`; none: the file must hold it)."""
    hints = get_type_hints(cls, include_extras=True)
    bounds = _BOUNDS.get(cls, {})
    spec = {}
    for f in fields(cls):
        default = default_in_json(cls, f.name)
        spec[f.name] = (_saved_type(hints[f.name], bounds.get(f.name, {})), ... if default is MISSING else default)
    return create_model(f"_Saved{cls.__name__}", __base__=_Model, **spec)


class _Event(_saved_model(RoundEvent)):
    @model_validator(mode="after")
    def _a_tree(self):
        """Parents come before their children, one level up; the accepted path and target_probs index real nodes."""
        for i, node in enumerate(self.nodes):
            if node.parent >= i:
                raise ValueError(f"nodes.{i}.parent={node.parent} must name an earlier node (or -1, the root)")
            want = 1 if node.parent < 0 else self.nodes[node.parent].depth + 1
            if node.depth != want:
                raise ValueError(f"nodes.{i}.depth={node.depth} should be {want} (its parent's depth + 1)")
        for k, a in enumerate(self.accepted):
            if a >= len(self.nodes):
                raise ValueError(f"accepted.{k}={a} is not a node (the round has {len(self.nodes)})")
        if len(self.target_probs) > len(self.nodes):
            raise ValueError(f"target_probs has {len(self.target_probs)} entries for {len(self.nodes)} nodes")
        return self


class _EventLine(_Model):
    type: Literal["event"]
    lane: Annotated[int, Field(ge=0, lt=MAX_LANES)]
    event: _Event
    pieces: Annotated[list[Piece], Field(max_length=MAX_DEPTH + 1)] = []
    node_texts: Annotated[list[Piece], Field(max_length=MAX_NODES)] = []
    bonus_text: Piece = ""


class _SummaryLine(_Model):
    type: Literal["summary"]
    lane: Annotated[int, Field(ge=0, lt=MAX_LANES)]
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] = ""
    stop_reason: Annotated[str, Field(max_length=32)] = ""
    stats: dict[Annotated[str, Field(max_length=64)], Any] = {}
    error: Annotated[str, Field(max_length=2000)] | None = None

    @field_validator("stats")
    @classmethod
    def _small(cls, v):
        if len(json.dumps(v)) > MAX_STATS_CHARS:
            raise ValueError(f"more than {MAX_STATS_CHARS} characters of statistics")
        return v


class _Line(_Model):
    type: Literal["event", "summary"]


class RunFileError(PossError):
    """A saved run that cannot be read."""


def run_lines(comparison: Comparison) -> Iterator[dict[str, Any]]:
    yield {
        "type": "run",
        "version": VERSION,
        "settings": comparison.spec.to_json(),
        "lanes": [
            {
                "method": lane.method,
                "label": lane.label,
                "trained": lane.trained,
                "special_ids": sorted(lane.special_ids),
                "budget": lane.tree_budget,
                "budget_auto": lane.budget_auto,
            }
            for lane in comparison.lanes
        ],
        "hardware": comparison.hardware,
        "prompt_tokens": comparison.prompt_tokens,
    }
    for i, lane in enumerate(comparison.lanes):
        for event, pieces, labels, bonus in zip(lane.events, lane.pieces, lane.node_texts, lane.bonus_texts):
            yield {
                "type": "event",
                "lane": i,
                "event": event.to_json(),
                "pieces": pieces,
                "node_texts": labels,
                "bonus_text": bonus,
            }
        summary = lane.summary or {}
        yield {
            "type": "summary",
            "lane": i,
            "text": summary.get("text", lane.text),
            "stop_reason": summary.get("stop_reason", "cancelled" if lane.error is None else "error"),
            "stats": summary.get("stats", {}),
            "error": lane.error,
        }


def _rounded(obj: Any, digits: int) -> Any:
    """Every float in `obj` to `digits` significant digits (ints, strings and structure unchanged)."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v, digits) for v in obj]
    return obj


def _gzipped(path: Path) -> bool:
    return path.suffix == ".gz"


def save_run(comparison: Comparison, path: str | Path, compact: bool = False) -> Path:
    """Write a comparison as JSONL (gzip-compressed when the name ends in .gz). `compact` (the bundled example
    recordings) writes floats (probabilities, scores, timings, deviations) to 4 significant digits, without spaces:
    about two thirds of the size, the same charts."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    opened = gzip.open(path, "wt", encoding="utf-8") if _gzipped(path) else open(path, "w", encoding="utf-8")
    with opened as f:
        f.writelines(_jsonl(comparison, compact))
    return path


def run_text(comparison: Comparison) -> str:
    """The JSONL `save_run` writes, as one string: a server sizes it before any byte is on disk."""
    return "".join(_jsonl(comparison, compact=False))


def _jsonl(comparison: Comparison, compact: bool):
    for line in run_lines(comparison):
        line = clean_json(line)
        if compact:
            yield json.dumps(_rounded(line, 4), ensure_ascii=False, separators=(",", ":")) + "\n"
        else:
            yield json.dumps(line, ensure_ascii=False) + "\n"


def _field_error(name: str, lineno: int, err: ValidationError) -> RunFileError:
    """One line naming the file, the line and the field: `line 3: event.nodes.0.depth: Input should be ...`."""
    first = err.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    msg = first.get("msg", "invalid")
    if first.get("type") == "literal_error" and not where:
        where = "type"
    value = first.get("input")
    shown = "" if isinstance(value, (dict, list)) else f" (got {str(value)[:40]!r})"
    if first.get("type") == "value_error":  # a check of ours (a setting's, the tree's): its words name the value
        msg, shown = str(first.get("ctx", {}).get("error", msg)).rstrip("."), ""
    return RunFileError(f"{name!r} is not a valid saved run: line {lineno}: {where or 'the line'}: {msg}{shown}.")


def _read_text(path: Path) -> str:
    """The file's text; a .gz file is decompressed, at most MAX_RUN_BYTES of it (a larger one is refused)."""
    if not _gzipped(path):
        return path.read_text(encoding="utf-8")
    with gzip.open(path, "rb") as f:
        data = f.read(MAX_RUN_BYTES + 1)
    if len(data) > MAX_RUN_BYTES:
        raise RunFileError(
            f"{path.name!r} holds more than {MAX_RUN_BYTES // 2**20} MB once decompressed: a saved "
            f"run may be at most that."
        )
    return data.decode("utf-8")


def load_run(path: str | Path) -> Comparison:
    """A finished comparison rebuilt from a saved file, plain or gzip-compressed (.jsonl.gz), whose lanes have no
    source: nothing left to run.

    Every line is checked against the schema above first (sizes, depths, lane indexes, specialists, counts, string
    lengths); RunFileError names the line and the field of the first thing wrong. Nothing is built until the whole
    file has passed."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_RUN_BYTES:
            raise RunFileError(
                f"{path.name!r} is {size / 2**20:.1f} MB: a saved run may be at most {MAX_RUN_BYTES // 2**20} MB."
            )
        texts = [s for s in _read_text(path).splitlines() if s.strip()]
    except (OSError, UnicodeDecodeError, EOFError, zlib.error) as err:
        raise RunFileError(f"could not read the saved run {path.name!r}: {err}") from err
    if not texts:
        raise RunFileError(f'{path.name!r} is empty: a saved run starts with a "run" line.')
    if len(texts) > 1 + MAX_LANES * (MAX_ROUNDS + 2):
        raise RunFileError(
            f"{path.name!r} has {len(texts)} lines: a saved run has at most {1 + MAX_LANES * (MAX_ROUNDS + 2)}."
        )
    lines = []
    for i, text in enumerate(texts, start=1):
        try:
            lines.append(json.loads(text))
        except (ValueError, RecursionError) as err:  # ValueError: also an integer past Python's digit limit
            why = getattr(err, "msg", None) or (
                "a number too long to read" if "digits" in str(err) else type(err).__name__
            )
            raise RunFileError(f"could not read the saved run {path.name!r}: line {i} is not JSON ({why}).") from err
    if not isinstance(lines[0], dict) or lines[0].get("type") != "run":
        raise RunFileError(f'{path.name!r} is not a saved run (its first line should be a "run" object).')
    try:
        head = _Head.model_validate(lines[0])
    except ValidationError as err:
        raise _field_error(path.name, 1, err) from err
    body: list[_EventLine | _SummaryLine] = []
    rounds = [0] * len(head.lanes)
    for i, obj in enumerate(lines[1:], start=2):
        try:
            kind = _Line.model_validate(obj).type
            line = (_EventLine if kind == "event" else _SummaryLine).model_validate(obj)
        except ValidationError as err:
            raise _field_error(path.name, i, err) from err
        if line.lane >= len(head.lanes):
            raise RunFileError(
                f"{path.name!r} is not a valid saved run: line {i}: lane: {line.lane} is not one of "
                f"the run's {len(head.lanes)} lanes (0 to {len(head.lanes) - 1})."
            )
        if kind == "event":
            rounds[line.lane] += 1
            if rounds[line.lane] > MAX_ROUNDS:
                raise RunFileError(
                    f"{path.name!r} is not a valid saved run: line {i}: lane {line.lane} has more "
                    f"than {MAX_ROUNDS} rounds."
                )
        body.append(line)
    return _build(head, body)


def _build(head: _Head, body: list) -> Comparison:
    """The comparison a validated file describes."""
    settings = head.settings.model_dump()
    if isinstance(head.settings.prompt, list):
        settings["prompt"] = [m.model_dump() for m in head.settings.prompt]
    spec = RunSpec.from_json(settings)
    lanes = [_saved_lane(d.model_dump()) for d in head.lanes]
    for line in body:
        lane = lanes[line.lane]
        if line.type == "event":
            lane.add(
                RoundEvent.from_json(line.event.model_dump()), list(line.pieces), list(line.node_texts), line.bonus_text
            )
        else:
            lane.summary = {"text": line.text, "stop_reason": line.stop_reason, "stats": dict(line.stats)}
            lane.error = line.error
    for lane in lanes:
        if lane.summary is None and lane.error is None:
            lane.summary = {"text": lane.text, "stop_reason": "cancelled", "stats": {}}
    return Comparison(spec, lanes, CallCap(), dict(head.hardware), replay=True, prompt_tokens=head.prompt_tokens)


def _saved_lane(d: dict[str, Any]) -> Lane:
    """A lane from a saved run's header."""
    return Lane(
        d["method"],
        str(d.get("label") or d["method"]),
        d["trained"],
        special_ids={int(t) for t in d.get("special_ids") or []},
        tree_budget=d.get("budget"),
        budget_auto=bool(d.get("budget_auto", False)),
    )


def _replay_source(lane: Lane) -> Iterator:
    for item in zip(lane.events, lane.pieces, lane.node_texts, lane.bonus_texts):
        yield item
    yield dict(lane.summary or {"text": lane.text, "stop_reason": "cancelled", "stats": {}})


def replay(comparison: Comparison) -> Comparison:
    """A fresh comparison that plays back the rounds of a finished one, one round per lane per turn."""
    lanes = []
    for lane in comparison.lanes:
        fresh = Lane(
            lane.method,
            lane.label,
            lane.trained,
            special_ids=set(lane.special_ids),
            source=_replay_source(lane),
            tree_budget=lane.tree_budget,
            budget_auto=lane.budget_auto,
        )
        if lane.error is not None and not lane.events:
            fresh.error = lane.error
        lanes.append(fresh)
    return Comparison(
        comparison.spec,
        lanes,
        CallCap(),
        dict(comparison.hardware),
        replay=True,
        prompt_tokens=comparison.prompt_tokens,
    )
