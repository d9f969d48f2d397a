"""The evidence summary: a small, versioned JSON of a benchmark run's figures (τ per dataset with 95% intervals,
pos-acc and the unconditional rate per position with Wilson intervals and their n, feature deviation by position,
speed-up and tokens/s over runs) with the command, hardware and date that produced them. The benchmark writes it as
`evidence.json` beside its records; `python -m poss_core.bench evidence RESULTS --out FILE` writes it from a results
folder; the app's Evidence tab reads it (`load_evidence`), or builds it from a results folder's records.

Every statistic comes from `poss_core.rounds.metrics`; this module only selects records and lays the figures out."""

from __future__ import annotations

import argparse
import json
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..base.errors import ConfigError
from ..base.json_safe import clean_json
from ..base.settings import LIMITS
from ..models.presets import presets
from ..rounds import metrics
from ..rounds.metrics import AcceptanceStats, Estimate
from ..runtime.methods import ORACLE, color_of, is_plain, label_of, short_of
from .analysis import OVERALL, aggregate, identity_check, pooled_events_by_method, question_totals
from .records import TurnRecord, records_in

SCHEMA = "poss-evidence"
VERSION = 2  # 2: rounds by drafted depth, drafted shares, deviation along the continuation and on tree nodes
READABLE = (1, 2)  # a version 1 file lacks those: its pos-acc counts every round as drafting its deepest position
FILE_NAME = "evidence.json"  # in a results folder, beside records.jsonl and summary.json
MAX_EVIDENCE_BYTES = 4 * 1024 * 1024  # a summary is tens of KB: anything near this is not one
MAX_RECORDS_BYTES = 64 * 1024 * 1024  # records.jsonl of a results folder read to build one
MAX_DEPTH = int(LIMITS["depth"][1])
MAX_NODES = int(LIMITS["tree_budget"][1]) - 1
# What one summary covers at most; with the size caps they bound the work a loaded file can ask for (the bootstrap
# over questions is the dearest part). The full evaluation sets are 6 datasets and 478 questions.
MAX_METHODS, MAX_DATASETS, MAX_RUNS, MAX_QUESTIONS = 16, 32, 20, 2000
# Rounds in a records.jsonl the app builds a summary from: its cost is Python work per round (pooled per run, per
# dataset and overall; `python scripts/evidence_load_cost.py` measures it), so this bounds a load to seconds whatever
# the bytes. A full evaluation run (478 questions, seven methods, one run, 64 new tokens) is about 130,000 rounds;
# larger runs are summarised with `python -m poss_core.bench evidence`, which has no such cap, and the summary loaded
# instead.
MAX_ROUNDS = 250_000
HASS = "hass"  # the single-layer control trained like POSS: the second base every draft's τ is compared with

# ---------------------------------------------------------------- the file's schema (also what the loader checks)

Text = Annotated[str, Field(max_length=4000)]
Name = Annotated[str, Field(min_length=1, max_length=128)]
Count = Annotated[int, Field(ge=0, le=10**12)]
Number = float | None  # null: not measured (a position nothing reached, a single run's std)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Interval(_Strict):
    """A figure, its 95% interval and the sample it rests on (rounds, questions or a rate's denominator)."""

    value: Number
    low: Number
    high: Number
    n: Count

    def estimate(self) -> Estimate:
        return Estimate(_nan(self.value), _nan(self.low), _nan(self.high), self.n)


class Spread(_Strict):
    """A timing: mean and sample std over runs."""

    mean: Number
    std: Number
    runs: Count

    def estimate(self) -> Estimate:
        """As an Estimate whose low/high are ± one std (equal to the mean when there is no spread to show)."""
        mean, std = _nan(self.mean), _nan(self.std)
        std = 0.0 if std != std else std
        return Estimate(mean, mean - std, mean + std, self.runs)


class Position(_Strict):
    """Draft position k: conditional pos-acc and the unconditional rate (over the rounds that drafted k), each with
    its Wilson 95% interval and n; the share of rounds that drafted k; and the mean feature deviation of accepted
    tokens there, with how many (conditional on acceptance: `deviation` of the cell is the unbiased one)."""

    k: Annotated[int, Field(ge=1, le=MAX_DEPTH)]
    pos_acc: Interval
    rate: Interval
    drafted_share: Number = None
    l2: Number = None
    cosine: Number = None
    deviation_n: Count = 0


Row = Annotated[list[Count], Field(max_length=MAX_DEPTH + 1)]


class Acceptance(_Strict):
    """The accept-length histogram (k = 0..depth), the rounds by drafted depth and accept length (`by_drafted[d][a]`),
    the deepest drafted position, the specialist per position, and per position the figures derived from them
    (stored for readers of the file; the charts rederive them)."""

    hist: Annotated[list[Count], Field(min_length=1, max_length=MAX_DEPTH + 1)]
    by_drafted: Annotated[list[Row], Field(max_length=MAX_DEPTH + 1)] | None = None
    drafted_depth: Annotated[int, Field(ge=0, le=MAX_DEPTH)]
    specialists: Annotated[list[Annotated[int, Field(ge=-1, le=MAX_DEPTH)]], Field(max_length=MAX_DEPTH)] = []
    positions: Annotated[list[Position], Field(max_length=MAX_DEPTH)] = []

    def stats(self, deviation: "Deviation | None" = None) -> AcceptanceStats:
        kept = [p for p in self.positions if p.deviation_n > 0]
        kinds = {
            "accepted": {
                "l2": [_nan(p.l2) for p in kept],
                "cosine": [_nan(p.cosine) for p in kept],
                "count": [p.deviation_n for p in kept],
            }
        }
        if deviation is not None:
            kinds.update(deviation.by_kind())
        return AcceptanceStats(
            hist=list(self.hist),
            drafted_depth=self.drafted_depth,
            specialists=list(self.specialists),
            deviation=kinds,
            by_drafted=[list(r) for r in self.by_drafted] if self.by_drafted else None,
        )


# The deviations measured without survivor bias (metrics.DEVIATION_KINDS less "accepted"), as the file names them.
UNBIASED_KINDS = ("every_position", "continuation", "tree_on_path", "tree_off_path")


class DeviationPoint(_Strict):
    """Mean feature deviation at draft position k over n rounds (continuation) or tree nodes."""

    k: Annotated[int, Field(ge=1, le=MAX_DEPTH)]
    l2: Number
    cosine: Number
    n: Count


Curve = Annotated[list[DeviationPoint], Field(max_length=MAX_DEPTH)]


class Deviation(_Strict):
    """Feature deviation by position, measured without survivor bias: along the target's own continuation from every
    position of it and from each round's root, and on every drafted tree node on / off the accepted path."""

    every_position: Curve = []
    continuation: Curve = []
    tree_on_path: Curve = []
    tree_off_path: Curve = []

    def by_kind(self) -> dict[str, dict[str, list]]:
        out = {}
        for kind in UNBIASED_KINDS:
            points = getattr(self, kind)
            if points:
                out[kind] = {
                    "l2": [_nan(p.l2) for p in points],
                    "cosine": [_nan(p.cosine) for p in points],
                    "count": [p.n for p in points],
                }
        return out


class Cell(_Strict):
    """One method on one dataset (or overall)."""

    tau: Interval  # n: rounds; the interval resamples questions
    questions: Count
    rounds: Count
    new_tokens: Count
    speedup: Spread
    tokens_per_s: Spread
    # building the draft tree per round (ms): what more specialists cost; absent from summaries written before it
    draft_ms: Spread | None = None
    acceptance: Acceptance
    deviation: Deviation = Deviation()

    def stats(self) -> AcceptanceStats:
        return self.acceptance.stats(self.deviation)


class MethodResult(_Strict):
    scopes: Annotated[dict[Name, Cell], Field(max_length=MAX_DATASETS + 1)]
    tau_mean_of_datasets: Interval  # the paper's mean column, its interval stratified by dataset
    tau_vs_eagle: Interval | None = None  # τ change over EAGLE (mean of datasets), paired bootstrap; n: questions
    # τ change over the hass control (one layer trained like POSS): what specialisation adds, on the same questions
    tau_vs_hass: Interval | None = None


class MethodInfo(_Strict):
    name: Name
    label: Name
    short: Name
    color: Annotated[str, Field(pattern=r"^#[0-9A-Fa-f]{6}$")]
    plain: bool = False
    trained: bool = True


class Meta(_Strict):
    command: Text = ""  # the benchmark run that measured the records
    summary_command: Text = ""  # what wrote this file (the run itself, or `python -m poss_core.bench evidence`)
    date: Text = ""
    hardware: Text = ""
    software: Text = ""
    target: Text = ""
    dtype: Text | None = None
    threads: Annotated[int, Field(ge=0, le=100_000)] | None = None
    git_commit: Text | None = None
    settings: Text = ""
    run_settings: Annotated[dict[Name, int | float | str | None], Field(max_length=32)] = {}
    budget: Text = ""
    questions: Text = ""
    notes: Annotated[list[Text], Field(max_length=32)] = []


class Identity(_Strict):
    reference: Name | None = None
    checked: Count = 0
    mismatches: Count = 0
    near_ties: Count = 0


class Evidence(_Strict):
    """A whole evidence summary, as written and as read back."""

    schema_: Literal["poss-evidence"] = Field(alias="schema")
    version: int
    preset: Name
    depth: Annotated[int, Field(ge=1, le=MAX_DEPTH)]
    datasets: Annotated[list[Name], Field(min_length=1, max_length=MAX_DATASETS)]
    methods: Annotated[list[MethodInfo], Field(min_length=1, max_length=MAX_METHODS)]
    results: Annotated[dict[Name, MethodResult], Field(max_length=MAX_METHODS)]
    identity: Identity = Identity()
    meta: Meta = Meta()

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _known_version(cls, data: Any) -> Any:
        # Checked before the fields, so a newer file says what to do instead of listing what changed.
        if isinstance(data, dict) and data.get("schema") == SCHEMA and data.get("version") not in READABLE:
            raise ValueError(
                f"version {data.get('version')!r} of the evidence summary: this app reads versions "
                f"{', '.join(map(str, READABLE))}; write it again with this checkout's "
                "`python -m poss_core.bench evidence`"
            )
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "Evidence":
        names = [m.name for m in self.methods]
        scopes = set(self.datasets) | {OVERALL}
        for name, result in self.results.items():
            if name not in names:
                raise ValueError(f"results for {name!r}, which `methods` does not list")
            if set(result.scopes) - scopes:
                raise ValueError(f"{name}: scopes {sorted(set(result.scopes) - scopes)} are not in `datasets`")
        return self

    # ------------------------------------------------------------ what the Evidence tab draws

    def label(self, name: str) -> str:
        return next((m.short for m in self.methods if m.name == name), name)

    def colors(self) -> dict[str, str]:
        return {m.short: m.color for m in self.methods}

    def draft_methods(self) -> list[MethodInfo]:
        return [m for m in self.methods if not m.plain and m.name in self.results]

    def acceptance(self, scope: str = OVERALL) -> dict[str, AcceptanceStats]:
        """Each draft method's acceptance statistics on `scope` (a dataset or overall), by its short label."""
        return {
            m.short: self.results[m.name].scopes[scope].stats()
            for m in self.draft_methods()
            if scope in self.results[m.name].scopes
        }

    def taus(self) -> tuple[dict[str, dict[str, Estimate]], dict[str, Estimate]]:
        """τ per dataset, and the mean of datasets, with 95% intervals, per draft method."""
        drafts = {m.short: self.results[m.name] for m in self.draft_methods()}
        return (
            {
                label: {d: r.scopes[d].tau.estimate() for d in self.datasets if d in r.scopes}
                for label, r in drafts.items()
            },
            {label: r.tau_mean_of_datasets.estimate() for label, r in drafts.items()},
        )

    def speedups(self, scope: str = OVERALL) -> tuple[dict[str, Estimate], dict[str, Estimate]]:
        """(speed-up, tokens/s) per method on `scope`, mean ± std over runs."""
        cells = {
            m.short: self.results[m.name].scopes[scope]
            for m in self.methods
            if m.name in self.results and scope in self.results[m.name].scopes
        }
        return (
            {label: c.speedup.estimate() for label, c in cells.items()},
            {label: c.tokens_per_s.estimate() for label, c in cells.items()},
        )

    def questions(self) -> dict[str, int]:
        """Questions per dataset (those of the first method that has the dataset)."""
        out: dict[str, int] = {}
        for d in self.datasets:
            out[d] = max((r.scopes[d].questions for r in self.results.values() if d in r.scopes), default=0)
        return out

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def _nan(v: float | None) -> float:
    return float("nan") if v is None else float(v)


# ---------------------------------------------------------------- building it from records


def interval(t: tuple[float, float, float], n: int) -> dict[str, Any]:
    return {"value": t[0], "low": t[1], "high": t[2], "n": n}


def _spread(mean: float, std: float, values: Sequence[float]) -> dict[str, Any]:
    return {"mean": mean, "std": std, "runs": sum(1 for v in values if v == v)}


def acceptance_json(stats: AcceptanceStats) -> dict[str, Any]:
    """The histogram and what it gives per position: rates with Wilson intervals and their n, the share of rounds
    that drafted the position, and the accepted-only deviation."""
    dev = stats.deviation_of("accepted")
    shares = stats.drafted_share()
    positions = []
    rates = {c: (stats.rates(c), stats.intervals(c), stats.counts(c)[1]) for c in (True, False)}
    for k in range(1, len(stats.hist)):
        row: dict[str, Any] = {"k": k, "drafted_share": shares[k - 1]}
        for key, conditional in (("pos_acc", True), ("rate", False)):
            values, intervals, n = rates[conditional]
            row[key] = interval((values[k - 1], *intervals[k - 1]), n[k - 1])
        if k <= len(dev["count"]):
            row.update(l2=dev["l2"][k - 1], cosine=dev["cosine"][k - 1], deviation_n=dev["count"][k - 1])
        positions.append(row)
    return {
        "hist": stats.hist,
        "by_drafted": stats.joint(),
        "drafted_depth": stats.drafted_depth,
        "specialists": stats.specialists,
        "positions": positions,
    }


def deviation_json(stats: AcceptanceStats) -> dict[str, list[dict[str, Any]]]:
    """The unbiased deviations by position, as the evidence file names them for outside tools."""
    out = {}
    for kind in UNBIASED_KINDS:
        d = stats.deviation_of(kind)
        out[kind] = [
            {"k": k, "l2": d["l2"][k - 1], "cosine": d["cosine"][k - 1], "n": n}
            for k, n in enumerate(d["count"], 1)
            if n
        ]
    return out


def build_evidence(
    records: Sequence[TurnRecord],
    meta: dict[str, Any],
    depth: int,
    identity: dict[str, Any] | None = None,
    summary_command: str = "",
    agg: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The evidence summary of benchmark records, as a JSON-ready dict (checked against `Evidence`)."""
    if not records:
        raise ConfigError("no benchmark records to summarise: run `python -m poss_core.bench ... --out DIR` first.")
    agg = agg or aggregate(records, depth)
    identity = identity or identity_check(records)
    preset = _label(meta.get("preset")) or "unknown"
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    datasets = agg["datasets"]
    known = presets().get(preset)
    methods_info = [
        {
            "name": m,
            "label": _label(labels.get(m)) or label_of(m, known),
            "short": short_of(m),
            "color": color_of(m) or "#999999",
            "plain": is_plain(m),
            "trained": not (known and m in known.drafts and not known.drafts[m].trained),
        }
        for m in agg["methods"]
    ]
    results = {}
    by_method: dict[str, list[TurnRecord]] = {}
    for r in records:  # one pass: each method's scopes then look only at its own records
        by_method.setdefault(r.method, []).append(r)
    for m in agg["methods"]:
        mine = by_method[m]
        by_question = question_totals(mine, m)
        per_set = [[t for (d, _), t in by_question.items() if d == dataset] for dataset in datasets]
        overall = metrics.bootstrap_tau(per_set)
        scopes = {}
        for scope in datasets + [OVERALL]:
            rows = per_set if scope == OVERALL else [per_set[datasets.index(scope)]]
            cell = agg["table"][m][scope]
            tau = overall["pooled"] if scope == OVERALL else metrics.bootstrap_tau(rows)["pooled"]
            events = pooled_events_by_method(mine, [m], None if scope == OVERALL else scope)[m]
            stats = metrics.acceptance_stats(events, depth)
            scopes[scope] = {
                "tau": interval(tau, cell["rounds"]),
                "questions": sum(len(r) for r in rows),
                "rounds": cell["rounds"],
                "new_tokens": cell["new_tokens"],
                "speedup": _spread(cell["speedup"], cell["speedup_std"], cell["speedup_runs"]),
                "tokens_per_s": _spread(cell["tokens_per_s"], cell["tokens_per_s_std"], cell["tokens_per_s_runs"]),
                "draft_ms": _spread(cell["draft_ms"], cell["draft_ms_std"], cell["tokens_per_s_runs"]),
                "acceptance": acceptance_json(stats),
                "deviation": deviation_json(stats),
            }
        result: dict[str, Any] = {
            "scopes": scopes,
            "tau_mean_of_datasets": interval(overall["mean_of_datasets"], agg["table"][m][OVERALL]["rounds"]),
        }
        if m in agg["vs_eagle"]:
            result["tau_vs_eagle"] = interval(
                agg["vs_eagle"][m]["tau_interval"]["mean_of_datasets"], sum(len(r) for r in per_set)
            )
        if HASS in agg["methods"] and m != HASS and not is_plain(m) and m != ORACLE:
            result["tau_vs_hass"] = interval(agg["tau_between"][m][HASS], sum(len(r) for r in per_set))
        results[m] = result
    if ORACLE in agg["methods"]:
        meta = {
            **meta,
            "notes": list(meta.get("notes", []))
            + ["The oracle drafts the target's own continuation: its τ and speed-up are the ceiling, not a method."],
        }
    out = {
        "schema": SCHEMA,
        "version": VERSION,
        "preset": preset,
        "depth": depth,
        "datasets": datasets,
        "methods": methods_info,
        "results": results,
        "identity": {
            "reference": identity.get("reference"),
            "checked": identity.get("checked", 0),
            "mismatches": len(identity.get("mismatches") or []),
            "near_ties": len(identity.get("near_ties") or []),
        },
        "meta": {**_known_meta(meta), "summary_command": summary_command or meta.get("command", "")},
    }
    out = _rounded(clean_json(out))
    _validate(out, "the summary just built")  # the writer and the reader agree on one schema
    return out


def _rounded(obj: Any) -> Any:
    """Floats to 6 significant digits: the file stays small and readable, far finer than any interval in it."""
    if isinstance(obj, float):
        return float(f"{obj:.6g}")
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def _label(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 128 else None


def _known_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The run's facts that `Meta` knows, each kept only if it passes the schema (a results folder's summary.json
    may come from anywhere: a bad field is left out, not fatal)."""
    kept = {}
    for key in Meta.model_fields:
        if meta.get(key) is None:
            continue
        try:
            Meta.model_validate({key: meta[key]})
        except ValidationError:
            continue
        kept[key] = meta[key]
    return kept


def write_evidence(path: Path, evidence: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(evidence, indent=1) + "\n")
    return path


# ---------------------------------------------------------------- reading it back (hostile files included)


def _validate(data: Any, where: str) -> Evidence:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ConfigError(
            f'{where} is not an evidence summary (no "schema": "{SCHEMA}"): load a file written by '
            f"`python -m poss_core.bench evidence RESULTS_DIR --out FILE`, or a results folder."
        )
    try:
        return Evidence.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(
            f"{where} is not a valid evidence summary: {field}: {first['msg']} ({err.error_count()} problem(s))."
        ) from None


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
    return _validate(_parse_json(_read_text(path, MAX_EVIDENCE_BYTES, roots), path.name), path.name)


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
