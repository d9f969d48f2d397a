"""What the benchmark keeps of each decode: a `TurnRecord` per method, question, turn and run (its rounds compactly),
pooled into one event stream per method, and written as records.jsonl and in Spec-Bench's answer layout."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..base.errors import ConfigError
from ..rounds import metrics
from ..rounds.events import RoundEvent, field_writer

# What the records leave out of a round: `round` is its place in the list and `accepted` is kept as its length (a
# light event's path is 0..n-1); the benchmark's tables and the evidence read none of the others. Every other field of
# RoundEvent is a column of `rounds`, a field added to it included.
NOT_KEPT = ("round", "accepted", "target_probs", "text", "draft_ms_by_depth", "bonus_prob")
COLUMNS = tuple(f.name for f in fields(RoundEvent) if f.name not in NOT_KEPT)


def _column(name: str, events: list[RoundEvent]) -> list[Any]:
    """One field of every round, a drafted node or a deviation as the list of its fields in declared order (a few
    numbers per node on disk); timings (`..._ms`) to 4 decimals, a tenth of a microsecond."""
    write = field_writer(RoundEvent, name, compact=True)
    values = [write(getattr(e, name)) for e in events]
    if name.endswith("_ms"):
        return [round(v, 4) if isinstance(v, float) else v for v in values]
    return values


@dataclass
class TurnRecord:
    """One decode: a method's answer to one turn of one question in one run, with its rounds kept compactly."""

    run: int
    method: str
    dataset: str
    question_id: Any
    category: str
    turn: int
    token_ids: list[int]
    text: str
    stop_reason: str
    wall_time: float  # seconds around the whole decode call
    events: list[RoundEvent] = field(default_factory=list)  # light events (see `light_event`)
    prompt_ids: list[int] = field(default_factory=list)

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def key(self) -> tuple:
        return (self.run, self.dataset, self.question_id, self.turn)

    def to_json(self) -> dict[str, Any]:
        """Columnar rounds: a long decode costs a few numbers per round on disk."""
        ev = self.events
        return {
            "run": self.run,
            "method": self.method,
            "dataset": self.dataset,
            "question_id": self.question_id,
            "category": self.category,
            "turn": self.turn,
            "token_ids": self.token_ids,
            "text": self.text,
            "stop_reason": self.stop_reason,
            "wall_time": self.wall_time,
            "prompt_ids": self.prompt_ids,
            "rounds": {"accept_len": [e.accept_len for e in ev], **{name: _column(name, ev) for name in COLUMNS}},
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "TurnRecord":
        """A record from `to_json` output. A column older records lack reads the field's default (`bonus`, which has
        none, reads -1: not known); the rounds end where the shortest column does."""
        r = obj.get("rounds", {})
        columns = {name: r[name] for name in ("accept_len", *COLUMNS) if r.get(name)}
        n = min(map(len, columns.values())) if "accept_len" in columns else 0
        events = []
        for i in range(n):
            row = {"bonus": -1, **{name: values[i] for name, values in columns.items()}}
            accepted = list(range(row.pop("accept_len")))
            events.append(RoundEvent.from_json({**row, "round": i, "accepted": accepted}))
        return cls(
            run=int(obj["run"]),
            method=obj["method"],
            dataset=obj["dataset"],
            question_id=obj["question_id"],
            category=obj.get("category", ""),
            turn=int(obj["turn"]),
            token_ids=list(obj["token_ids"]),
            text=obj.get("text", ""),
            stop_reason=obj.get("stop_reason", ""),
            wall_time=float(obj["wall_time"]),
            events=events,
            prompt_ids=list(obj.get("prompt_ids", [])),
        )


def records_in(folder: Path) -> Path:
    """A results folder's records.jsonl, or a ConfigError saying which folder to give instead."""
    path = Path(folder) / "records.jsonl"
    if not path.is_file():
        raise ConfigError(
            f"{folder} has no records.jsonl: give a folder written by `python -m poss_core.bench ... --out DIR`."
        )
    return path


def read_records(path: Path) -> list[TurnRecord]:
    with open(path) as f:
        return [TurnRecord.from_json(json.loads(line)) for line in f if line.strip()]


def first_questions(records: Sequence[TurnRecord], limit: int) -> list[TurnRecord]:
    """The records of the first `limit` questions of each dataset, in the order the benchmark ran them."""
    kept: dict[str, list[Any]] = {}
    for r in records:
        ids = kept.setdefault(r.dataset, [])
        if r.question_id not in ids and len(ids) < limit:
            ids.append(r.question_id)
    return [r for r in records if r.question_id in kept[r.dataset]]


def spec_bench_rows(records: Sequence[TurnRecord], method: str, model_id: str) -> list[dict[str, Any]]:
    """One row per question in Spec-Bench's answer layout; `choices[i]` is run i. `accept_lengths` follows Spec-Bench:
    tokens produced per draft round (accepted + bonus), all turns in order, so its mean is τ."""
    rows: dict[tuple, dict[str, Any]] = {}
    mine = sorted((r for r in records if r.method == method), key=lambda r: (r.run, r.turn))
    for r in mine:
        qkey = (r.dataset, r.question_id)
        row = rows.setdefault(
            qkey,
            {
                "question_id": r.question_id,
                "category": r.category,
                "dataset": r.dataset,
                "model_id": f"{model_id}-{method}",
                "choices": {},
            },
        )
        choice = row["choices"].setdefault(
            r.run,
            {
                "index": r.run,
                "turns": [],
                "decoding_steps": [],
                "new_tokens": [],
                "wall_time": [],
                "accept_lengths": [],
            },
        )
        choice["turns"].append(r.text)
        choice["decoding_steps"].append(len(metrics.draft_rounds(r.events)) + 1)
        choice["new_tokens"].append(r.new_tokens)
        choice["wall_time"].append(r.wall_time)
        choice["accept_lengths"].extend(n + 1 for n in metrics.accept_lengths(r.events))
    out = []
    for row in rows.values():
        row["choices"] = [row["choices"][k] for k in sorted(row["choices"])]
        out.append(row)
    return out


def read_summary(path: Path) -> dict[str, Any]:
    """A results folder's summary.json."""
    return json.loads(Path(path).read_text())
