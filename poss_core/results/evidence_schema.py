"""The evidence summary's schema: its version, the bounds a loaded file must keep, and the models every figure is
read into (`Evidence`). The builder checks what it writes against it, the loader what it reads."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..base.errors import ConfigError
from ..base.settings import BOUNDS
from ..rounds.metrics import AcceptanceStats, Estimate
from .analysis import OVERALL

SCHEMA = "poss-evidence"
VERSION = 2  # 2: rounds by drafted depth, drafted shares, deviation along the continuation and on tree nodes
READABLE = (1, 2)  # a version 1 file lacks those: its pos-acc counts every round as drafting its deepest position
MAX_DEPTH = int(BOUNDS["depth"][1])
MAX_NODES = int(BOUNDS["tree_budget"][1]) - 1
# What one summary covers at most; with the size caps they bound the work a loaded file can ask for (the bootstrap
# over questions is the dearest part). The full evaluation sets are 6 datasets and 478 questions.
MAX_METHODS, MAX_DATASETS, MAX_RUNS, MAX_QUESTIONS = 16, 32, 20, 2000

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


def validate_evidence(data: Any, where: str) -> Evidence:
    """`data` as an `Evidence`, or a ConfigError naming `where` and the first field that is wrong."""
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
