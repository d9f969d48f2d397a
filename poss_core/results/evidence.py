"""The evidence summary: a small, versioned JSON of a benchmark run's figures (τ per dataset with 95% intervals,
pos-acc and the unconditional rate per position with Wilson intervals and their n, feature deviation by position,
speed-up and tokens/s over runs) with the command, hardware and date that produced them. The benchmark writes it as
`evidence.json` beside its records; `python -m poss_core.bench evidence RESULTS --out FILE` writes it from a results
folder; the app's Evidence tab reads it (`load_evidence`), or builds it from a results folder's records.

This module reads and writes the file (a loaded file may be hostile: every read is bounded and checked); its
schema is `evidence_schema`'s, and building it from records `evidence_build`'s."""

from __future__ import annotations

import argparse
import json
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..base.errors import ConfigError
from .evidence_build import build_evidence
from .evidence_schema import (
    MAX_DATASETS,
    MAX_DEPTH,
    MAX_METHODS,
    MAX_NODES,
    MAX_QUESTIONS,
    MAX_RUNS,
    Evidence,
    Name,
    validate_evidence,
)
from .records import TurnRecord, records_in

FILE_NAME = "evidence.json"  # in a results folder, beside records.jsonl and summary.json
MAX_EVIDENCE_BYTES = 4 * 1024 * 1024  # a summary is tens of KB: anything near this is not one
MAX_RECORDS_BYTES = 64 * 1024 * 1024  # records.jsonl of a results folder read to build one
# Rounds in a records.jsonl the app builds a summary from: its cost is Python work per round (pooled per run, per
# dataset and overall; `python scripts/evidence_load_cost.py` measures it), so this bounds a load to seconds whatever
# the bytes. A full evaluation run (478 questions, seven methods, one run, 64 new tokens) is about 130,000 rounds;
# larger runs are summarised with `python -m poss_core.bench evidence`, which has no such cap, and the summary loaded
# instead.
MAX_ROUNDS = 250_000


def write_evidence(path: Path, evidence: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(evidence, indent=1) + "\n")
    return path


# ---------------------------------------------------------------- reading it back (hostile files included)


Roots = Sequence[Path] | None  # the resolved folders a load may read files from (None: a path the server chose)


def shown_path(path: Path, roots: Roots = None) -> str:
    """How a message names a file: from the allowed folder it lies in ("results/x/evidence.json"), never the server's
    absolute path; by its name alone when it lies in none."""
    for root in roots or ():
        if path.is_relative_to(root):
            return str(Path(root.name) / path.relative_to(root))
    return path.name or "that path"


def _regular_file(path: Path, roots: Roots) -> Path:
    """`path` resolved, when that is a regular file (not a folder, device or pipe, which could block a read) and,
    with `roots`, inside one of them: a link out of them is refused before anything is opened."""
    shown = shown_path(path, roots)
    try:
        real = path.resolve()
        mode = real.stat().st_mode
    except (OSError, RuntimeError) as err:  # a link loop (RuntimeError), a name too long, a missing file
        raise ConfigError(f"{shown} could not be opened ({type(err).__name__}).") from None
    if roots is not None and not any(real.is_relative_to(root) for root in roots):
        raise ConfigError(f"{shown} is a link to a file outside the folders this app reads: it was not opened.")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{shown} is not a regular file: it was not opened.")
    return real


def _read_text(path: Path, limit: int, roots: Roots = None) -> str:
    real, shown = _regular_file(path, roots), shown_path(path, roots)
    size = real.stat().st_size
    if size > limit:
        raise ConfigError(
            f"{shown} is {size / 2**20:.1f} MB, over the {limit / 2**20:.0f} MB an evidence "
            f"summary or results folder may be here: summarise it with `python -m poss_core.bench "
            f"evidence FOLDER --out FILE` and load that file."
        )
    try:
        return real.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{shown} could not be read as UTF-8 text ({type(err).__name__}).") from None


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ConfigError(f"{where} is not valid JSON ({str(err).splitlines()[0][:120]}).") from None


class _Rounds(BaseModel):
    """records.jsonl's columnar rounds, bounded before any list is built from them."""

    model_config = ConfigDict(extra="ignore")
    prefill: list[bool] = []
    accept_len: list[Annotated[int, Field(ge=0, le=MAX_DEPTH)]] = []
    new_tokens: list[Annotated[int, Field(ge=0, le=10**9)]] = []
    draft_ms: list[float] = []
    verify_ms: list[float] = []
    wall_ms: list[float] = []
    feature_deviation: list[Annotated[list[tuple[float, float]], Field(max_length=MAX_DEPTH)]] = []
    tokens: list[Annotated[list[int], Field(max_length=MAX_DEPTH + 1)]] = []
    bonus: list[int] = []
    # score and draft probability are null where the draft is not observable (prompt lookup, assisted generation)
    nodes: list[
        Annotated[
            list[
                tuple[
                    int,
                    int,
                    Annotated[int, Field(ge=1, le=MAX_DEPTH)],
                    float | None,
                    float | None,
                    Annotated[int, Field(ge=0, le=MAX_DEPTH)],
                ]
            ],
            Field(max_length=MAX_NODES),
        ]
    ] = []


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")
    run: Annotated[int, Field(ge=0, le=1000)]
    method: Name
    dataset: Name
    question_id: Annotated[int, Field(ge=-(2**62), le=2**62)] | Annotated[str, Field(max_length=256)]
    turn: Annotated[int, Field(ge=0, le=1000)]
    token_ids: list[int]
    wall_time: float
    rounds: _Rounds


def parse_records(text: str, where: str, capped: bool = True) -> list[TurnRecord]:
    """records.jsonl's rows, each checked against bounds first (a line that is not one names its number); more than
    MAX_ROUNDS rounds in all is refused before they are built unless `capped` is False (the command line)."""
    out, rounds, max_rounds = [], 0, MAX_ROUNDS if capped else None
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = _parse_json(line, f"{where} line {i}")
        try:
            rounds += len(_Record.model_validate(row).rounds.accept_len)
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise ConfigError(f"{where} line {i} is not a benchmark record: {field}: {first['msg']}.") from None
        if max_rounds is not None and rounds > max_rounds:
            raise ConfigError(
                f"{where} holds more than {max_rounds:,} rounds (line {i}), more than this app builds "
                f"a summary from: summarise it with `python -m poss_core.bench evidence FOLDER --out "
                f"FILE` and load that file."
            )
        try:
            out.append(TurnRecord.from_json(row))
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"{where} line {i} is not a benchmark record ({type(err).__name__}: {err}).") from None
    if not out:
        raise ConfigError(f"{where} holds no benchmark records.")
    extent = [
        ("methods", {r.method for r in out}, MAX_METHODS),
        ("datasets", {r.dataset for r in out}, MAX_DATASETS),
        ("runs", {r.run for r in out}, MAX_RUNS),
        ("questions", {(r.dataset, r.question_id) for r in out}, MAX_QUESTIONS),
    ]
    for name, found, cap in extent:
        if len(found) > cap:
            raise ConfigError(f"{where} holds {len(found)} {name}; a summary covers at most {cap}: split the run.")
    return out


def _from_records(records_path: Path, summary_path: Path | None, capped: bool = True, roots: Roots = None) -> Evidence:
    records = parse_records(_read_text(records_path, MAX_RECORDS_BYTES, roots), records_path.name, capped)
    meta: dict[str, Any] = {"command": "(not known: records.jsonl without its summary.json)"}
    identity = None
    depth = max((n.depth for r in records for e in r.events for n in e.nodes), default=1)
    if summary_path is not None and summary_path.is_file():
        summary = _parse_json(_read_text(summary_path, MAX_RECORDS_BYTES, roots), summary_path.name)
        if isinstance(summary, dict):
            meta = summary.get("meta") if isinstance(summary.get("meta"), dict) else meta
            identity = summary.get("identity") if isinstance(summary.get("identity"), dict) else None
            if isinstance(summary.get("depth"), int) and 1 <= summary["depth"] <= MAX_DEPTH:
                depth = max(depth, summary["depth"])
    try:
        built = build_evidence(
            records,
            meta,
            depth,
            identity if _identity_ok(identity) else None,
            summary_command=f"built from {records_path.parent.name}/{records_path.name}",
        )
    except (KeyError, TypeError, ZeroDivisionError) as err:
        raise ConfigError(f"{records_path.name} could not be summarised ({type(err).__name__}: {err}).") from None
    return Evidence.model_validate(built)


def _identity_ok(identity: Any) -> bool:
    """A summary.json's identity check is used only when it has the shape the benchmark writes."""
    return (
        isinstance(identity, dict)
        and isinstance(identity.get("reference"), (str, type(None)))
        and isinstance(identity.get("checked", 0), int)
        and all(isinstance(identity.get(k) or [], list) for k in ("mismatches", "near_ties"))
    )


def load_evidence(path: str | Path, roots: Roots = None) -> Evidence:
    """An evidence summary from a summary .json, a results folder (its evidence.json, else built from its
    records.jsonl and summary.json) or a records.jsonl. Only regular files are read; with `roots` (the app's folder
    box) only those whose resolved path lies inside one of them, and messages name files from there. Anything else,
    too large, corrupt or of another schema or version raises ConfigError saying what to load instead."""
    path = Path(path)
    try:
        return _load(path, roots)
    except OSError as err:  # a name the system refuses, a folder that cannot be listed
        raise ConfigError(f"{shown_path(path, roots)} could not be read ({type(err).__name__}).") from None


def _load(path: Path, roots: Roots) -> Evidence:
    if path.is_dir():
        if (path / FILE_NAME).is_file():
            path = path / FILE_NAME
        elif (path / "records.jsonl").is_file():
            return _from_records(path / "records.jsonl", path / "summary.json", roots=roots)
        else:
            raise ConfigError(
                f"{shown_path(path, roots)} is not a results folder: it has neither {FILE_NAME} nor "
                f"records.jsonl (a folder written by `python -m poss_core.bench ... --out DIR`)."
            )
    if not path.is_file():
        raise ConfigError(
            f"{shown_path(path, roots)} does not exist: give an evidence .json, a records.jsonl or a results folder."
        )
    if path.suffix == ".jsonl":
        return _from_records(
            path, path.with_name("summary.json") if path.name == "records.jsonl" else None, roots=roots
        )
    return validate_evidence(_parse_json(_read_text(path, MAX_EVIDENCE_BYTES, roots), path.name), path.name)


# ---------------------------------------------------------------- `python -m poss_core.bench evidence`


def evidence_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.bench evidence",
        description="Write the evidence summary (what the app's Evidence tab shows) of a results folder: τ per "
        "dataset with 95% intervals, pos-acc and the unconditional rate per position with Wilson "
        "intervals and their n, feature deviation, speed-up and tokens/s, with the run's command, "
        "hardware and date. For the bundled drafts: python -m poss_core.bench evidence results/paper "
        "--out assets/evidence/smollm2-135m.json",
    )
    p.add_argument("folder", help="a results folder (records.jsonl and summary.json, from python -m poss_core.bench)")
    p.add_argument("--out", default=None, help=f"where to write it (default FOLDER/{FILE_NAME})")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    evidence = _from_records(records_in(folder), folder / "summary.json", capped=False).to_json()
    evidence["meta"]["summary_command"] = "python -m poss_core.bench evidence " + shlex.join(list(argv))
    out = write_evidence(Path(args.out) if args.out else folder / FILE_NAME, evidence)
    sizes = ", ".join(f"{d} {n}" for d, n in Evidence.model_validate(evidence).questions().items())
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KB; questions per dataset: {sizes})")
    return 0
