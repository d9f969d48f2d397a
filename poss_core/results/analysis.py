"""Benchmark records -> tables: per method and dataset, per run and pooled; speed-ups against the faster plain decoder;
changes against EAGLE with a bootstrap interval; the identity check against plain decoding; what `auto` expected.

Every statistic is computed by `rounds.metrics` from events. A question's turns are pooled into one event stream
(`views.pooling.pool_events`, which keeps `new_tokens` cumulative), so pooled τ, pos-acc, histograms, feature deviation,
time split and tokens/s over a dataset are the same functions applied to more rounds. Timings are aggregated per run
and shown as mean ± sample std over runs (never the fastest run)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from ..models.numerics import first_difference
from ..rounds import metrics
from ..rounds.events import RoundEvent
from ..runtime.methods import ORACLE, OTHER_PRECISION_PLAIN, PLAIN, PLAIN_HF, is_plain
from ..views.pooling import pool_events
from .records import TurnRecord

OVERALL = "overall"


def _finite(values: Iterable[float]) -> list[float]:
    return [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (NaN std with a single value)."""
    vals = _finite(values)
    if not vals:
        return math.nan, math.nan
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else math.nan


def relative_change(value: float, base: float) -> float:
    """value / base - 1 (NaN when either is missing or the base is 0)."""
    if value is None or base is None or math.isnan(value) or math.isnan(base) or base == 0:
        return math.nan
    return value / base - 1.0


def _summary(events: list[RoundEvent], depth: int) -> dict[str, Any]:
    s = metrics.summarize(events, depth)
    s["wall_s"] = metrics.wall_seconds(events)
    return s


def aggregate(records: Sequence[TurnRecord], depth: int, eagle: str = "eagle") -> dict[str, Any]:
    """Tables from records: per method x (dataset | overall), per run and pooled over runs; speed-ups against the
    faster plain decoder of the same run and dataset; relative change of every other draft against EAGLE."""
    methods = list(dict.fromkeys(r.method for r in records))
    datasets = list(dict.fromkeys(r.dataset for r in records))
    runs = sorted({r.run for r in records})
    scopes = datasets + [OVERALL]
    per_run, pooled = scope_summaries(records, scopes, runs, depth)
    plain = [m for m in methods if is_plain(m)]
    baseline = {s: plain_baseline({m: per_run[m][s] for m in plain}, len(runs)) for s in scopes}
    table = {
        m: {
            s: table_cell(
                per_run[m][s],
                pooled[m][s],
                baseline[s]["tokens_per_s"],
                per_run[ORACLE][s] if ORACLE in methods else None,
            )
            for s in scopes
        }
        for m in methods
    }

    # τ's change of every draft over every other on the same questions, with its paired-bootstrap interval: what
    # specialisation adds is a difference between drafts trained alike (POSS-1 against POSS-2, POSS against hass),
    # not only one from EAGLE. Each method's questions are summed once; the vs-EAGLE rows read the same intervals.
    drafts = [m for m in methods if not is_plain(m) and m != ORACLE]
    totals = {m: question_totals(records, m) for m in drafts}
    changes = {(m, b): paired_tau_change(totals[m], totals[b], datasets) for m in drafts for b in drafts if b != m}
    vs_eagle = {
        m: {
            **change_over(per_run[m], per_run[eagle], table[m], table[eagle], datasets),
            "tau_interval": changes[(m, eagle)],
        }
        for m in (drafts if eagle in methods else [])
        if m != eagle
    }
    tau_between = {m: {b: changes[(m, b)]["mean_of_datasets"] for b in drafts if b != m} for m in drafts}

    def mean_over_datasets(key: str) -> dict[str, float]:
        return {m: mean_std([table[m][d][key] for d in datasets])[0] for m in methods}

    return {
        "methods": methods,
        "datasets": datasets,
        "runs": runs,
        "depth": depth,
        "table": table,
        "baseline": baseline,
        "vs_eagle": vs_eagle,
        "tau_between": tau_between,
        "mean_speedup_over_datasets": mean_over_datasets("speedup"),
        "oracle": ORACLE if ORACLE in methods else None,
        "mean_oracle_fraction_over_datasets": mean_over_datasets("oracle_fraction"),
        # The paper's "mean" column: every dataset weighs the same, however many rounds it took (the pooled τ weighs
        # each round the same, so datasets with short acceptances and long answers pull it down).
        "mean_tau_over_datasets": mean_over_datasets("tau_pooled"),
    }


Summaries = dict[str, dict[str, Any]]  # method -> scope -> what metrics.summarize gives (and wall_s)


def scope_summaries(
    records: Sequence[TurnRecord], scopes: Sequence[str], runs: Sequence[int], depth: int
) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], Summaries]:
    """Each method's rounds summarised per scope (a dataset or overall): per run (in `runs` order), and pooled over
    runs. A question's turns are pooled into one stream first."""
    by_method: dict[str, list[TurnRecord]] = {}
    for r in records:
        by_method.setdefault(r.method, []).append(r)

    def select(method: str, scope: str, run: int | None) -> list[list[RoundEvent]]:
        return [
            r.events
            for r in by_method[method]
            if (scope == OVERALL or r.dataset == scope) and (run is None or r.run == run)
        ]

    per_run: dict[str, dict[str, list[dict[str, Any]]]] = {}
    pooled: Summaries = {}
    for m in by_method:
        per_run[m], pooled[m] = {}, {}
        for s in scopes:
            per_run[m][s] = [_summary(pool_events(select(m, s, r)), depth) for r in runs]
            pooled[m][s] = _summary(pool_events(select(m, s, None)), depth)
    return per_run, pooled


def plain_baseline(plain_runs: dict[str, list[dict[str, Any]]], n_runs: int) -> dict[str, list]:
    """The faster plain decoder of each run on one scope (`plain_runs`: each plain method's per-run summaries there):
    its tokens/s and which method it was (NaN and "" where no plain decoder was timed)."""
    tps, which = [], []
    for i in range(n_runs):
        options = [
            (rows[i]["tokens_per_s"], m) for m, rows in plain_runs.items() if not math.isnan(rows[i]["tokens_per_s"])
        ]
        best = max(options) if options else (math.nan, "")
        tps.append(best[0])
        which.append(best[1])
    return {"tokens_per_s": tps, "method": which}


# What a table cell keeps of the rounds pooled over runs, under the summary's own names.
POOLED_KEYS = (
    "pos_acc",
    "pos_rate",
    "accept_hist",
    "feature_deviation",
    "deviation",
    "drafted_share",
    "new_tokens",
    "rounds",
)


def table_cell(
    rows: Sequence[dict[str, Any]],
    pooled: dict[str, Any],
    baseline_tps: Sequence[float],
    oracle_rows: Sequence[dict[str, Any]] | None,
) -> dict[str, Any]:
    """One method on one scope: timings and speed-ups as mean ± std over its runs (`rows`), against each run's faster
    plain decoder (`baseline_tps`); τ, pos-acc, histograms and deviations of the rounds pooled over runs; and its share
    of the oracle's tokens/s (`oracle_rows`, the oracle's runs, where the benchmark ran it)."""
    speedups = [metrics.speedup(row["tokens_per_s"], baseline_tps[i]) for i, row in enumerate(rows)]
    cell: dict[str, Any] = {
        "runs": len(rows),
        "speedup_runs": speedups,
        "tokens_per_s_runs": [row["tokens_per_s"] for row in rows],
    }
    for key in ("tokens_per_s", "draft_ms", "verify_ms", "overhead_ms", "round_ms", "wall_s"):
        cell[key], cell[key + "_std"] = mean_std([row[key] for row in rows])
    cell["speedup"], cell["speedup_std"] = mean_std(speedups)
    cell["tau"], cell["tau_std"] = mean_std([row["tau"] for row in rows])
    cell["tau_pooled"] = pooled["tau"]
    for key in POOLED_KEYS:
        cell[key] = pooled[key]
    cell["overhead_share"] = (
        cell["overhead_ms"] / cell["round_ms"] if cell["round_ms"] and not math.isnan(cell["round_ms"]) else math.nan
    )
    # The oracle's speed-up is the ceiling of this engine at these settings: each method's share of it, per run (the
    # two tokens/s of the same run, so the machine's speed that run cancels out), mean ± std over runs.
    fractions = (
        [
            row["tokens_per_s"] / o["tokens_per_s"] if o["tokens_per_s"] else math.nan
            for row, o in zip(rows, oracle_rows)
        ]
        if oracle_rows is not None
        else []
    )
    cell["oracle_fraction_runs"] = fractions
    cell["oracle_fraction"], cell["oracle_fraction_std"] = mean_std(fractions)
    return cell


def change_over(
    mine: dict[str, list[dict[str, Any]]],
    base: dict[str, list[dict[str, Any]]],
    my_table: dict[str, dict[str, Any]],
    base_table: dict[str, dict[str, Any]],
    datasets: Sequence[str],
) -> dict[str, Any]:
    """A method's relative change over a base (EAGLE) per scope: pooled τ, and tokens/s run by run (mean ± std);
    then both as the mean over datasets. `mine` and `base` are per-run summaries by scope, the tables their cells."""
    row: dict[str, Any] = {}
    for s in my_table:
        ratios = [relative_change(a["tokens_per_s"], b["tokens_per_s"]) for a, b in zip(mine[s], base[s])]
        sp, sp_std = mean_std(ratios)
        row[s] = {
            "tau": relative_change(my_table[s]["tau_pooled"], base_table[s]["tau_pooled"]),
            "speed": sp,
            "speed_std": sp_std,
        }
    row["mean_over_datasets"] = {
        "tau": mean_std([row[d]["tau"] for d in datasets])[0],
        "speed": mean_std([row[d]["speed"] for d in datasets])[0],
    }
    return row


def paired_tau_change(
    mine: dict[tuple, metrics.TauTotals], theirs: dict[tuple, metrics.TauTotals], datasets: Sequence[str]
) -> dict[str, tuple[float, float, float]]:
    """A method's τ change over a base with a 95% paired-bootstrap interval over the questions both answered
    (`question_totals` of each; `metrics`); a question's turns and runs count as one unit, since at temperature 0 its
    runs repeat the same rounds."""
    groups = [[(mine[k], theirs[k]) for k in mine if k[0] == d and k in theirs] for d in datasets]
    return metrics.bootstrap_tau_change(groups)


def question_totals(records: Sequence[TurnRecord], method: str) -> dict[tuple, metrics.TauTotals]:
    """τ's (sum, rounds) of each question (keyed (dataset, question_id)), its turns and runs summed: the unit every
    bootstrap over questions resamples."""
    by_question: dict[tuple, metrics.TauTotals] = {}
    for r in records:
        if r.method == method:
            s, n = metrics.tau_totals(r.events)
            a, b = by_question.get((r.dataset, r.question_id), (0, 0))
            by_question[(r.dataset, r.question_id)] = (a + s, b + n)
    return by_question


def pooled_events_by_method(
    records: Sequence[TurnRecord], methods: Sequence[str] | None = None, dataset: str | None = None
) -> dict[str, list[RoundEvent]]:
    """Every method's rounds pooled over questions and runs: what the app's chart builders take."""
    methods = list(methods) if methods is not None else list(dict.fromkeys(r.method for r in records))
    return {
        m: pool_events(r.events for r in records if r.method == m and (dataset is None or r.dataset == dataset))
        for m in methods
    }


def identity_check(records: Sequence[TurnRecord], reference: str | None = None) -> dict[str, Any]:
    """Compare every method's token ids with plain decoding's for the same run, question and turn (temperature 0).
    Returns the number of turns compared and one entry per mismatching turn (first differing index included);
    `classify_mismatches` then tells rounding near-ties from real mismatches."""
    methods = list(dict.fromkeys(r.method for r in records))
    if reference is None:
        reference = next((m for m in (PLAIN, PLAIN_HF) if m in methods), None)
    if reference is None:
        return {"reference": None, "checked": 0, "mismatches": [], "near_ties": []}
    ref = {r.key: r for r in records if r.method == reference}
    checked, mismatches = 0, []
    for r in records:
        if r.method == reference or r.method in OTHER_PRECISION_PLAIN or r.key not in ref:
            continue
        checked += 1
        want = ref[r.key].token_ids
        if r.token_ids != want:
            i = first_difference(r.token_ids, want)
            i = min(len(r.token_ids), len(want)) if i is None else i  # one ended where the other went on
            mismatches.append(
                {
                    "method": r.method,
                    "run": r.run,
                    "dataset": r.dataset,
                    "question_id": r.question_id,
                    "turn": r.turn,
                    "index": i,
                    "got": r.token_ids[i] if i < len(r.token_ids) else None,
                    "want": want[i] if i < len(want) else None,
                    "got_len": len(r.token_ids),
                    "want_len": len(want),
                }
            )
    return {"reference": reference, "checked": checked, "mismatches": mismatches, "near_ties": []}


def _conversation(m: dict[str, Any]) -> tuple:
    return m["method"], m["run"], m["dataset"], str(m["question_id"])


def first_divergences(mismatches: Sequence[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """The earliest differing turn of each method's conversation: later turns have another context (the method's
    own earlier answer), so only these can be diagnosed against the reference's prompt."""
    first: dict[tuple, dict[str, Any]] = {}
    for m in mismatches:
        key = _conversation(m)
        if key not in first or m["turn"] < first[key]["turn"]:
            first[key] = m
    return first


def classify_mismatches(identity: dict[str, Any], tolerance: float, precision: str = "") -> dict[str, Any]:
    """Split the mismatches into real ones and rounding near-ties. A turn counts as a near-tie when, where it first
    differs, the plain target's own logits put the two tokens within `tolerance` of each other (`margin`, set by the
    caller): a batched verify pass and a one-token plain step round differently, and in low precision that can flip
    an exact or near tie. A later turn of a conversation whose earlier turn diverged that way has a different
    context, so it is counted with the near-ties too. Everything else stays a mismatch; with a tolerance of 0
    (row-invariant numerics, where no rounding explains a difference) every divergence is one."""
    first = first_divergences(identity["mismatches"])
    real, ties = [], []
    for m in sorted(identity["mismatches"], key=lambda m: (*_conversation(m), m["turn"])):
        lead = first[_conversation(m)]
        tie = (
            tolerance > 0
            and lead.get("margin") is not None
            and lead["got"] is not None
            and abs(lead["margin"]) <= tolerance
        )
        m["kind"] = ("near-tie" if tie else "mismatch") if m is lead else "after an earlier turn's divergence"
        (ties if tie else real).append(m)
    return {**identity, "mismatches": real, "near_ties": ties, "tolerance": tolerance, "precision": precision}


def subset_identity(identity: dict[str, Any], records: Sequence[TurnRecord]) -> dict[str, Any]:
    """A stored identity check cut to the questions `records` keep (its near-tie margins needed the target, so they
    are kept as measured, not recomputed)."""
    kept = {(r.dataset, r.question_id) for r in records}

    def keep(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [m for m in rows if (m["dataset"], m["question_id"]) in kept]

    return {
        **identity,
        "checked": identity_check(records, identity.get("reference"))["checked"],
        "mismatches": keep(identity.get("mismatches", [])),
        "near_ties": keep(identity.get("near_ties") or []),
    }


def chosen_row(choice: dict[str, Any]) -> dict[str, Any] | None:
    """The row of a `BudgetChoice` table (as JSON) that `auto` picked."""
    for row in choice.get("table", []):
        if (
            row["budget"] == choice["budget"]
            and row.get("depth_stop", 0.0) == choice.get("depth_stop", 0.0)
            and (choice.get("depth") is None or row["depth"] == choice["depth"])
        ):
            return row
    return None


def auto_expectations(agg: dict[str, Any], meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Per method `auto` fitted: what it expected (τ, round ms, tokens/s) against what the measured questions gave.
    Measured tokens/s counts each decode's prefill, which the expectation leaves out: 1000·τ / round ms ("rounds
    only") is the comparable figure."""
    out = []
    for m, choice in (meta.get("budget_choices") or {}).items():
        row, cell = chosen_row(choice), agg["table"].get(m, {}).get(OVERALL)
        if row is None or cell is None:
            continue
        tau, round_ms = cell["tau_pooled"], cell["round_ms"]
        out.append(
            {
                "method": m,
                "expected_tau": row["tau"],
                "tau": tau,
                "expected_round_ms": row["round_ms"],
                "round_ms": round_ms,
                "expected_tokens_per_s": row["tokens_per_s"],
                "rounds_only_tokens_per_s": 1000.0 * tau / round_ms if round_ms else math.nan,
                "tokens_per_s": cell["tokens_per_s"],
                "expected_plain_tokens_per_s": choice["plain_tokens_per_s"],
            }
        )
    return out
