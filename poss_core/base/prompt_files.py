"""Prompts from files (JSONL in the common dataset layouts, or text with one prompt a line), never from eval sets."""

from __future__ import annotations

import glob
import json
from collections.abc import Iterator
from pathlib import Path

from .errors import PossError


def prompt_from_row(row: dict) -> str | None:
    """A prompt (the first user turn) from the common dataset layouts."""
    if "conversations" in row:  # ShareGPT: the first human turn
        for turn in row["conversations"]:
            if turn.get("from") in ("human", "user"):
                return str(turn.get("value", ""))
        return None
    if "messages" in row:
        users = [m for m in row["messages"] if m.get("role") == "user"]
        return str(users[0]["content"]) if users else None
    if "turns" in row:
        return str(row["turns"][0])
    for key in ("question", "prompt", "instruction", "text"):
        if row.get(key):
            text = str(row[key])
            extra = (row.get("instances") or [{}])[0].get("input") if key == "instruction" else None
            return f"{text}\n\n{extra}" if extra else text
    return None


def prompt_files(paths: list[str]) -> Iterator[Path]:
    """The files a list of paths/globs names, refusing the evaluation sets."""
    for pattern in paths:
        for f in sorted(glob.glob(pattern)) or [pattern]:
            p = Path(f)
            if "eval" in p.parts:
                raise PossError(f"{f} is an evaluation set: drafts are never trained or calibrated on eval/ prompts.")
            if not p.is_file():
                raise PossError(f"prompt file {f} does not exist.")
            yield p


def jsonl_rows(paths: list[str]) -> Iterator[dict]:
    for p in prompt_files(paths):
        if p.suffix == ".jsonl":
            for line in p.read_text().splitlines():
                if line.strip():
                    yield json.loads(line)


def read_prompts(paths: list[str]) -> list[str]:
    """Prompts from JSONL files (any layout above) or text files (one prompt per line). Refuses the eval sets."""
    prompts = [p for row in jsonl_rows(paths) if (p := prompt_from_row(row)) and p.strip()]
    for f in prompt_files(paths):
        if f.suffix != ".jsonl":
            prompts.extend(line.strip() for line in f.read_text().splitlines() if line.strip())
    return prompts
