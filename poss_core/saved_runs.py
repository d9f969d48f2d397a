"""Saved comparisons: every lane's events as JSONL plus the settings, loaded back and replayed without a model.

Format (one JSON object per line):
    {"type": "run", "version": 1, "settings": {...RunSpec}, "lanes": [{"method", "label", "trained", "special_ids", ...}],
     "hardware": {...}}
    {"type": "event", "lane": i, "event": RoundEvent.to_json(), "pieces": [...], "node_texts": [...], "bonus_text": s}
    {"type": "summary", "lane": i, "text": ..., "stop_reason": ..., "stats": {...}, "error": null}
Token texts are stored with the events, so a replay needs no tokenizer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import methods
from .compare import Comparison, Lane, RunSpec
from .errors import PossError
from .events import RoundEvent
from .json_safe import clean_json

VERSION = 1


class RunFileError(PossError):
    """A saved run that cannot be read."""


def run_lines(comparison: Comparison) -> Iterator[dict[str, Any]]:
    yield {"type": "run", "version": VERSION, "settings": comparison.spec.to_json(),
           "lanes": [{"method": lane.method, "label": lane.label, "trained": lane.trained,
                      "special_ids": sorted(lane.special_ids),
                      "budget": lane.budget, "budget_auto": lane.budget_auto} for lane in comparison.lanes],
           "hardware": comparison.hardware, "prompt_tokens": comparison.prompt_tokens}
    for i, lane in enumerate(comparison.lanes):
        for event, pieces, labels, bonus in zip(lane.events, lane.pieces, lane.node_texts, lane.bonus_texts):
            yield {"type": "event", "lane": i, "event": event.to_json(), "pieces": pieces, "node_texts": labels,
                   "bonus_text": bonus}
        summary = lane.summary or {}
        yield {"type": "summary", "lane": i, "text": summary.get("text", lane.text),
               "stop_reason": summary.get("stop_reason", "cancelled" if lane.error is None else "error"),
               "stats": summary.get("stats", {}), "error": lane.error}


def save_run(comparison: Comparison, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for line in run_lines(comparison):
            f.write(json.dumps(clean_json(line), ensure_ascii=False) + "\n")
    return path


def load_run(path: str | Path) -> Comparison:
    """A finished comparison rebuilt from a saved file (its lanes have no source: nothing left to run)."""
    path = Path(path)
    try:
        lines = [json.loads(s) for s in path.read_text(encoding="utf-8").splitlines() if s.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunFileError(f"could not read the saved run {path.name!r}: {err}") from err
    if not lines or lines[0].get("type") != "run":
        raise RunFileError(f"{path.name!r} is not a saved run (its first line should be a \"run\" object).")
    head = lines[0]
    try:
        spec = RunSpec.from_json(head["settings"])
        lanes = [_saved_lane(d) for d in head["lanes"]]
        for line in lines[1:]:
            lane = lanes[int(line["lane"])]
            if line["type"] == "event":
                event = RoundEvent.from_json(line["event"])
                lane.add(event, list(line.get("pieces", [])), list(line.get("node_texts", [])),
                         str(line.get("bonus_text", "")))
            elif line["type"] == "summary":
                lane.summary = {"text": line.get("text", ""), "stop_reason": line.get("stop_reason", ""),
                                "stats": line.get("stats", {})}
                lane.error = line.get("error")
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise RunFileError(f"{path.name!r} is damaged: {type(err).__name__}: {err}") from err
    for lane in lanes:
        if lane.summary is None and lane.error is None:
            lane.summary = {"text": lane.text, "stop_reason": "cancelled", "stats": {}}
    return Comparison(spec, lanes, threading.Event(), dict(head.get("hardware", {})), replay=True,
                      prompt_tokens=int(head.get("prompt_tokens", 0)))


def _saved_lane(d: dict[str, Any]) -> Lane:
    """A lane from a saved run's header (runs saved before the `trained` flag said so in the label)."""
    label = str(d.get("label", d["method"]))
    trained = bool(d.get("trained", " (untrained" not in label))
    return Lane(methods.canonical(d["method"]), label.split(" (untrained")[0], trained,
                special_ids={int(t) for t in d.get("special_ids", [])}, budget=d.get("budget"),
                budget_auto=bool(d.get("budget_auto", False)))


def _replay_source(lane: Lane) -> Iterator:
    for item in zip(lane.events, lane.pieces, lane.node_texts, lane.bonus_texts):
        yield item
    yield dict(lane.summary or {"text": lane.text, "stop_reason": "cancelled", "stats": {}})


def replay(comparison: Comparison) -> Comparison:
    """A fresh comparison that plays back the rounds of a finished one, one round per lane per turn."""
    lanes = []
    for lane in comparison.lanes:
        fresh = Lane(lane.method, lane.label, lane.trained, special_ids=set(lane.special_ids),
                     source=_replay_source(lane), budget=lane.budget, budget_auto=lane.budget_auto)
        if lane.error is not None and not lane.events:
            fresh.error = lane.error
        lanes.append(fresh)
    return Comparison(comparison.spec, lanes, threading.Event(), dict(comparison.hardware), replay=True,
                      prompt_tokens=comparison.prompt_tokens)
