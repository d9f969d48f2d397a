"""The evidence summary built from benchmark records: per method and scope (a dataset or overall) τ with its
bootstrap interval over questions, the acceptance histogram and what it gives per position, the unbiased feature
deviations, speed-up and tokens/s over runs; then rounded, and checked against the schema it will be read with.

Every statistic comes from `poss_core.rounds.metrics` and `analysis`; this module only selects and lays them out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ..base.errors import ConfigError
from ..base.json_safe import clean_json
from ..models.presets import presets
from ..rounds import metrics
from ..rounds.metrics import AcceptanceStats
from ..runtime.methods import ORACLE, color_of, is_plain, label_of, short_of
from .analysis import OVERALL, aggregate, identity_check, pooled_events_by_method, question_totals
from .evidence_schema import SCHEMA, UNBIASED_KINDS, VERSION, Meta, validate_evidence
from .records import TurnRecord

HASS = "hass"  # the single-layer control trained like POSS: the second base every draft's τ is compared with
ORACLE_NOTE = "The oracle drafts the target's own continuation: its τ and speed-up are the ceiling, not a method."


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
    methods_info = method_infos(agg["methods"], preset, meta)
    by_method: dict[str, list[TurnRecord]] = {}
    for r in records:  # one pass: each method's scopes then look only at its own records
        by_method.setdefault(r.method, []).append(r)
    results = {m: method_result(by_method[m], m, agg, depth) for m in agg["methods"]}
    if ORACLE in agg["methods"]:
        meta = {**meta, "notes": list(meta.get("notes", [])) + [ORACLE_NOTE]}
    out = {
        "schema": SCHEMA,
        "version": VERSION,
        "preset": preset,
        "depth": depth,
        "datasets": agg["datasets"],
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
    validate_evidence(out, "the summary just built")  # the writer and the reader agree on one schema
    return out


def method_infos(methods: Sequence[str], preset: str, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Each method's name, label (the run's own where it named one), short label, colour, and whether it is plain
    decoding or a draft the preset ships untrained."""
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    known = presets().get(preset)
    return [
        {
            "name": m,
            "label": _label(labels.get(m)) or label_of(m, known),
            "short": short_of(m),
            "color": color_of(m) or "#999999",
            "plain": is_plain(m),
            "trained": not (known and m in known.drafts and not known.drafts[m].trained),
        }
        for m in methods
    ]


def method_result(mine: Sequence[TurnRecord], m: str, agg: dict[str, Any], depth: int) -> dict[str, Any]:
    """Method `m`'s figures from its own records `mine`: a cell per scope, τ's mean of datasets, and its τ change
    over EAGLE and over the hass control where the run has them."""
    datasets = agg["datasets"]
    by_question = question_totals(mine, m)
    per_set = [[t for (d, _), t in by_question.items() if d == dataset] for dataset in datasets]
    overall = metrics.bootstrap_tau(per_set)
    scopes = {}
    for scope in datasets + [OVERALL]:
        rows = per_set if scope == OVERALL else [per_set[datasets.index(scope)]]
        tau = overall["pooled"] if scope == OVERALL else metrics.bootstrap_tau(rows)["pooled"]
        scopes[scope] = scope_cell(mine, m, scope, agg["table"][m][scope], tau, sum(len(r) for r in rows), depth)
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
    return result


def scope_cell(
    mine: Sequence[TurnRecord],
    m: str,
    scope: str,
    cell: dict[str, Any],
    tau: tuple[float, float, float],
    questions: int,
    depth: int,
) -> dict[str, Any]:
    """Method `m` on one scope: τ (its interval over `questions`), the sizes, the timings over runs (from
    aggregation's `cell`) and the acceptance and deviations of its pooled rounds there."""
    events = pooled_events_by_method(mine, [m], None if scope == OVERALL else scope)[m]
    stats = metrics.acceptance_stats(events, depth)
    return {
        "tau": interval(tau, cell["rounds"]),
        "questions": questions,
        "rounds": cell["rounds"],
        "new_tokens": cell["new_tokens"],
        "speedup": _spread(cell["speedup"], cell["speedup_std"], cell["speedup_runs"]),
        "tokens_per_s": _spread(cell["tokens_per_s"], cell["tokens_per_s_std"], cell["tokens_per_s_runs"]),
        "draft_ms": _spread(cell["draft_ms"], cell["draft_ms_std"], cell["tokens_per_s_runs"]),
        "acceptance": acceptance_json(stats),
        "deviation": deviation_json(stats),
    }


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
