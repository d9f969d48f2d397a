"""Benchmark records -> aggregates, identity check, Spec-Bench JSONL, markdown and HTML: pure functions, no model.

Every statistic is computed by `poss_core.metrics` from events. A question's turns are pooled into one event stream
(`pool_events`, which keeps `new_tokens` cumulative), so pooled τ, pos-acc, histograms, feature deviation, time split
and tokens/s over a dataset are the same functions applied to more rounds. Timings are aggregated per run and shown as
mean ± sample std over runs (never the fastest run)."""

from __future__ import annotations

import html
import json
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import metrics
from .decoding.events import DraftNode, FeatureDeviation, RoundEvent

PLAIN_METHODS = ("ar", "ar-hf")  # the project's plain decoder, and transformers' `generate`
# Plain decoding of the same target loaded in another precision (`ar-float32` next to a bf16 run): a speed baseline
# only; it is a numerically different model, so the identity check leaves it out.
OTHER_PRECISION_PLAIN = ("ar-float32", "ar-bfloat16", "ar-float16")
OVERALL = "overall"
METHOD_TITLES = {"ar": "plain (PlainDecoder)", "ar-hf": "plain (transformers generate)",
                 **{m: f"plain (PlainDecoder, {m[3:]})" for m in OTHER_PRECISION_PLAIN}}


def is_plain(method: str) -> bool:
    """Plain decoding of any kind: the baselines speed-ups are measured against."""
    return method in PLAIN_METHODS or method in OTHER_PRECISION_PLAIN


# ----- records ---------------------------------------------------------------------------------------------------
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
            "run": self.run, "method": self.method, "dataset": self.dataset, "question_id": self.question_id,
            "category": self.category, "turn": self.turn, "token_ids": self.token_ids, "text": self.text,
            "stop_reason": self.stop_reason, "wall_time": self.wall_time, "prompt_ids": self.prompt_ids,
            "rounds": {
                "prefill": [e.prefill for e in ev],
                "accept_len": [e.accept_len for e in ev],
                "new_tokens": [e.new_tokens for e in ev],
                "draft_ms": [round(e.draft_ms, 4) for e in ev],
                "verify_ms": [round(e.verify_ms, 4) for e in ev],
                "wall_ms": [round(e.wall_ms, 4) for e in ev],
                "feature_deviation": [[[d.l2, d.cosine] for d in e.feature_deviation] for e in ev],
                "tokens": [e.tokens for e in ev],
                "bonus": [e.bonus for e in ev],
                "nodes": [[[n.token, n.parent, n.depth, n.score, n.draft_prob, n.specialist] for n in e.nodes]
                          for e in ev],
            },
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "TurnRecord":
        r = obj.get("rounds", {})
        n = len(r.get("accept_len", []))

        def col(name, default):
            return r.get(name) or [default] * n

        events = [
            RoundEvent(round=i, nodes=[DraftNode(int(t), int(p), int(d), float(s), float(q), int(g))
                                       for t, p, d, s, q, g in nodes],
                       accepted=list(range(acc)), bonus=int(bonus), target_probs=[],
                       feature_deviation=[FeatureDeviation(float(a), float(b)) for a, b in dev],
                       draft_ms=float(dm), verify_ms=float(vm), new_tokens=int(nt), tokens=[int(t) for t in toks],
                       wall_ms=float(wm), prefill=bool(pf))
            for i, (pf, acc, nt, dm, vm, wm, dev, toks, bonus, nodes) in enumerate(zip(
                col("prefill", False), col("accept_len", 0), col("new_tokens", 0), col("draft_ms", 0.0),
                col("verify_ms", 0.0), col("wall_ms", 0.0), col("feature_deviation", []), col("tokens", []),
                col("bonus", -1), col("nodes", [])))
        ]
        return cls(run=int(obj["run"]), method=obj["method"], dataset=obj["dataset"], question_id=obj["question_id"],
                   category=obj.get("category", ""), turn=int(obj["turn"]), token_ids=list(obj["token_ids"]),
                   text=obj.get("text", ""), stop_reason=obj.get("stop_reason", ""),
                   wall_time=float(obj["wall_time"]), events=events, prompt_ids=list(obj.get("prompt_ids", [])))


def light_event(e: RoundEvent) -> RoundEvent:
    """A round as aggregation keeps it: acceptance, deviations, timings, emitted tokens, and of the tree only the
    accepted path (first, so `accepted` is 0..accept_len-1) plus the first drafted node of every other depth (so the
    drafted depth and which specialist drafted each position stay known). Parents are re-indexed within the kept
    nodes (-1 when the parent was not kept)."""
    keep = list(e.accepted)
    depths = {e.nodes[a].depth for a in keep}
    for i, n in enumerate(e.nodes):
        if n.depth not in depths:
            depths.add(n.depth)
            keep.append(i)
    remap = {old: new for new, old in enumerate(keep)}
    nodes = [replace(e.nodes[i], parent=remap.get(e.nodes[i].parent, -1)) for i in keep]
    probs = [e.target_probs[i] for i in keep] if len(e.target_probs) == len(e.nodes) else []
    return replace(e, nodes=nodes, accepted=list(range(len(e.accepted))), target_probs=probs, text="")


def pool_events(turns: Iterable[Sequence[RoundEvent]]) -> list[RoundEvent]:
    """Concatenate several decodes' events into one stream whose `new_tokens` keeps counting, so that
    `metrics.tokens_per_s` of the pool is total new tokens over total wall time."""
    out: list[RoundEvent] = []
    offset = 0
    for events in turns:
        for e in events:
            out.append(replace(e, round=len(out), new_tokens=offset + e.new_tokens))
        offset += metrics.total_new_tokens(list(events))
    return out


# ----- small numeric helpers -------------------------------------------------------------------------------------
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


# ----- aggregation -----------------------------------------------------------------------------------------------
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

    def select(method: str, scope: str, run: int | None) -> list[list[RoundEvent]]:
        return [r.events for r in records if r.method == method and (scope == OVERALL or r.dataset == scope)
                and (run is None or r.run == run)]

    per_run: dict[str, dict[str, list[dict[str, Any]]]] = {}
    pooled: dict[str, dict[str, dict[str, Any]]] = {}
    for m in methods:
        per_run[m], pooled[m] = {}, {}
        for s in scopes:
            per_run[m][s] = [_summary(pool_events(select(m, s, r)), depth) for r in runs]
            pooled[m][s] = _summary(pool_events(select(m, s, None)), depth)

    plain = [m for m in methods if is_plain(m)]
    baseline: dict[str, dict[str, Any]] = {}
    for s in scopes:
        tps, which = [], []
        for i in range(len(runs)):
            options = [(per_run[m][s][i]["tokens_per_s"], m) for m in plain
                       if not math.isnan(per_run[m][s][i]["tokens_per_s"])]
            best = max(options) if options else (math.nan, "")
            tps.append(best[0])
            which.append(best[1])
        baseline[s] = {"tokens_per_s": tps, "method": which}

    table: dict[str, dict[str, dict[str, Any]]] = {}
    for m in methods:
        table[m] = {}
        for s in scopes:
            rows = per_run[m][s]
            speedups = [metrics.speedup(row["tokens_per_s"], baseline[s]["tokens_per_s"][i])
                        for i, row in enumerate(rows)]
            cell: dict[str, Any] = {"runs": len(rows), "speedup_runs": speedups,
                                    "tokens_per_s_runs": [row["tokens_per_s"] for row in rows]}
            for key in ("tokens_per_s", "draft_ms", "verify_ms", "overhead_ms", "round_ms", "wall_s"):
                cell[key], cell[key + "_std"] = mean_std([row[key] for row in rows])
            cell["speedup"], cell["speedup_std"] = mean_std(speedups)
            cell["tau"], cell["tau_std"] = mean_std([row["tau"] for row in rows])
            p = pooled[m][s]
            cell.update({"tau_pooled": p["tau"], "pos_acc": p["pos_acc"], "pos_rate": p["pos_rate"],
                         "accept_hist": p["accept_hist"], "feature_deviation": p["feature_deviation"],
                         "new_tokens": p["new_tokens"], "rounds": p["rounds"]})
            cell["overhead_share"] = (cell["overhead_ms"] / cell["round_ms"]
                                      if cell["round_ms"] and not math.isnan(cell["round_ms"]) else math.nan)
            table[m][s] = cell

    vs_eagle: dict[str, dict[str, Any]] = {}
    if eagle in methods:
        for m in methods:
            if m == eagle or is_plain(m):
                continue
            row: dict[str, Any] = {}
            for s in scopes:
                ratios = [relative_change(a["tokens_per_s"], b["tokens_per_s"])
                          for a, b in zip(per_run[m][s], per_run[eagle][s])]
                sp, sp_std = mean_std(ratios)
                row[s] = {"tau": relative_change(table[m][s]["tau_pooled"], table[eagle][s]["tau_pooled"]),
                          "speed": sp, "speed_std": sp_std}
            row["mean_over_datasets"] = {
                "tau": mean_std([row[d]["tau"] for d in datasets])[0],
                "speed": mean_std([row[d]["speed"] for d in datasets])[0],
            }
            row["tau_interval"] = tau_change_interval(records, m, eagle, datasets)
            vs_eagle[m] = row

    mean_speedup = {m: mean_std([table[m][d]["speedup"] for d in datasets])[0] for m in methods}
    # The paper's "mean" column: every dataset weighs the same, however many rounds it took (the pooled τ weighs
    # each round the same, so datasets with short acceptances and long answers pull it down).
    mean_tau = {m: mean_std([table[m][d]["tau_pooled"] for d in datasets])[0] for m in methods}
    return {"methods": methods, "datasets": datasets, "runs": runs, "depth": depth, "table": table,
            "baseline": baseline, "vs_eagle": vs_eagle, "mean_speedup_over_datasets": mean_speedup,
            "mean_tau_over_datasets": mean_tau}


def first_questions(records: Sequence[TurnRecord], limit: int) -> list[TurnRecord]:
    """The records of the first `limit` questions of each dataset, in the order the benchmark ran them."""
    kept: dict[str, list[Any]] = {}
    for r in records:
        ids = kept.setdefault(r.dataset, [])
        if r.question_id not in ids and len(ids) < limit:
            ids.append(r.question_id)
    return [r for r in records if r.question_id in kept[r.dataset]]


def subset_identity(identity: dict[str, Any], records: Sequence[TurnRecord]) -> dict[str, Any]:
    """A stored identity check cut to the questions `records` keep (its near-tie margins needed the target, so they
    are kept as measured, not recomputed)."""
    kept = {(r.dataset, r.question_id) for r in records}

    def keep(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [m for m in rows if (m["dataset"], m["question_id"]) in kept]

    return {**identity, "checked": identity_check(records, identity.get("reference"))["checked"],
            "mismatches": keep(identity.get("mismatches", [])), "near_ties": keep(identity.get("near_ties") or [])}


def tau_change_interval(records: Sequence[TurnRecord], method: str, base: str,
                        datasets: Sequence[str]) -> dict[str, tuple[float, float, float]]:
    """`method`'s τ change over `base` with a 95% paired-bootstrap interval over questions (`metrics`); a question's
    turns and runs count as one unit, since at temperature 0 its runs repeat the same rounds."""
    def totals(m: str) -> dict[tuple, tuple[int, int]]:
        by_question: dict[tuple, tuple[int, int]] = {}
        for r in records:
            if r.method == m:
                s, n = metrics.tau_totals(r.events)
                a, b = by_question.get((r.dataset, r.question_id), (0, 0))
                by_question[(r.dataset, r.question_id)] = (a + s, b + n)
        return by_question

    mine, theirs = totals(method), totals(base)
    groups = [[(mine[k], theirs[k]) for k in mine if k[0] == d and k in theirs] for d in datasets]
    return metrics.bootstrap_tau_change(groups)


def pooled_events_by_method(records: Sequence[TurnRecord], methods: Sequence[str] | None = None,
                            dataset: str | None = None) -> dict[str, list[RoundEvent]]:
    """Every method's rounds pooled over questions and runs: what the app's chart builders take."""
    methods = list(methods) if methods is not None else list(dict.fromkeys(r.method for r in records))
    return {m: pool_events(r.events for r in records if r.method == m and (dataset is None or r.dataset == dataset))
            for m in methods}


# ----- identity check --------------------------------------------------------------------------------------------
def identity_check(records: Sequence[TurnRecord], reference: str | None = None) -> dict[str, Any]:
    """Compare every method's token ids with plain decoding's for the same run, question and turn (temperature 0).
    Returns the number of turns compared and one entry per mismatching turn (first differing index included);
    `classify_mismatches` then tells rounding near-ties from real mismatches."""
    methods = list(dict.fromkeys(r.method for r in records))
    if reference is None:
        reference = next((m for m in PLAIN_METHODS if m in methods), None)
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
            i = next((j for j, (a, b) in enumerate(zip(r.token_ids, want)) if a != b), min(len(r.token_ids), len(want)))
            mismatches.append({"method": r.method, "run": r.run, "dataset": r.dataset, "question_id": r.question_id,
                               "turn": r.turn, "index": i,
                               "got": r.token_ids[i] if i < len(r.token_ids) else None,
                               "want": want[i] if i < len(want) else None,
                               "got_len": len(r.token_ids), "want_len": len(want)})
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
    context, so it is counted with the near-ties too. Everything else stays a mismatch."""
    first = first_divergences(identity["mismatches"])
    real, ties = [], []
    for m in sorted(identity["mismatches"], key=lambda m: (*_conversation(m), m["turn"])):
        lead = first[_conversation(m)]
        tie = lead.get("margin") is not None and lead["got"] is not None and abs(lead["margin"]) <= tolerance
        m["kind"] = ("near-tie" if tie else "mismatch") if m is lead else "after an earlier turn's divergence"
        (ties if tie else real).append(m)
    return {**identity, "mismatches": real, "near_ties": ties, "tolerance": tolerance, "precision": precision}


def identity_banner(identity: dict[str, Any]) -> str:
    n = len(identity["mismatches"])
    ties = identity.get("near_ties") or []
    if identity.get("skipped"):
        return f"Identity check skipped: {identity['skipped']}."
    if identity["reference"] is None:
        return "Identity check not run: no plain-decoding method in --methods."
    if n == 0 and not ties:
        return (f"Identity check PASSED: every method's output equals {identity['reference']} token for token "
                f"on {identity['checked']} turns.")
    if n == 0:
        first = sum(1 for m in ties if m["kind"] == "near-tie")
        return (f"Identity check PASSED up to rounding: {identity['checked'] - len(ties)} of {identity['checked']} "
                f"turns equal {identity['reference']} token for token; {first} first differ where the plain "
                f"target's logits for the two tokens are within {identity['tolerance']:g} of each other (a near-tie "
                f"that {identity.get('precision') or 'this precision'} rounds differently in a batched verify pass "
                f"and a one-token step), and {len(ties) - first} only after such a divergence in an earlier turn. "
                f"No real mismatch.")
    methods = sorted({m["method"] for m in identity["mismatches"]})
    extra = f" ({len(ties)} more differ only at rounding near-ties)" if ties else ""
    return (f"!!! IDENTITY CHECK FAILED: {n} of {identity['checked']} turns differ from {identity['reference']} "
            f"({', '.join(methods)}){extra}. At temperature 0 speculative decoding must reproduce plain decoding "
            f"exactly: this is a bug. !!!")


# ----- Spec-Bench JSONL ------------------------------------------------------------------------------------------
def spec_bench_rows(records: Sequence[TurnRecord], method: str, model_id: str) -> list[dict[str, Any]]:
    """One row per question in Spec-Bench's answer layout; `choices[i]` is run i. `accept_lengths` follows Spec-Bench:
    tokens produced per draft round (accepted + bonus), all turns in order, so its mean is τ."""
    rows: dict[tuple, dict[str, Any]] = {}
    mine = sorted((r for r in records if r.method == method), key=lambda r: (r.run, r.turn))
    for r in mine:
        qkey = (r.dataset, r.question_id)
        row = rows.setdefault(qkey, {"question_id": r.question_id, "category": r.category, "dataset": r.dataset,
                                     "model_id": f"{model_id}-{method}", "choices": {}})
        choice = row["choices"].setdefault(r.run, {"index": r.run, "turns": [], "decoding_steps": [],
                                                   "new_tokens": [], "wall_time": [], "accept_lengths": []})
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


# ----- rendering -------------------------------------------------------------------------------------------------
def _fmt(v: float | None, digits: int = 2, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v * 100:+.{digits}f}%" if pct else f"{v:.{digits}f}"


def _pm(mean: float, std: float, digits: int = 2, suffix: str = "") -> str:
    if mean is None or math.isnan(mean):
        return "–"
    s = f"{mean:.{digits}f}{suffix}"
    return s if std is None or math.isnan(std) else f"{s} ± {std:.{digits}f}"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _title(method: str, labels: dict[str, str]) -> str:
    return labels.get(method) or METHOD_TITLES.get(method, method)


def markdown_report(agg: dict[str, Any], identity: dict[str, Any], meta: dict[str, Any]) -> str:
    """The benchmark's tables in markdown, with the command, hardware and date that produced them."""
    t, methods, datasets = agg["table"], agg["methods"], agg["datasets"]
    spec = [m for m in methods if not is_plain(m)]
    labels = meta.get("labels", {})
    scopes = datasets + [OVERALL]
    out: list[str] = [f"# POSS benchmark: {meta.get('preset', '')}", ""]
    banner = identity_banner(identity)
    out += [f"**{banner}**" if identity["mismatches"] else banner, ""]
    listed = identity["mismatches"] + (identity.get("near_ties") or [])
    if listed:
        rows = [[m["method"], str(m["run"]), m["dataset"], str(m["question_id"]), str(m["turn"]), str(m["index"]),
                 str(m["got"]), str(m["want"]), _fmt(m.get("margin"), 4), m.get("kind", "mismatch")]
                for m in listed[:50]]
        out += [_md_table(["method", "run", "dataset", "question", "turn", "first diff", "got", "want",
                           "plain logit margin", "kind"], rows), ""]
    out += ["```", meta.get("command", ""), "```", ""]
    facts = [("date", meta.get("date")), ("hardware", meta.get("hardware")), ("software", meta.get("software")),
             ("target", meta.get("target")), ("settings", meta.get("settings")), ("tree budget", meta.get("budget")),
             ("questions", meta.get("questions"))]
    out += [f"- {k}: {v}" for k, v in facts if v] + [""]
    for note in meta.get("notes", []):
        out.append(f"> {note}")
    if meta.get("notes"):
        out.append("")
    out += [f"Speed-up = tokens/s ÷ tokens/s of the fastest plain decoder "
            f"({', '.join(m for m in methods if is_plain(m))}) on the same "
            f"run and dataset; mean ± sample std over {len(agg['runs'])} run(s). τ = mean (accept_len + 1) per "
            f"draft round; pooled = over every round of every dataset, mean of datasets = the average of the "
            f"datasets' τ (the paper's mean column).", ""]

    out += ["## Overall", ""]
    rows = []
    for m in methods:
        c = t[m][OVERALL]
        rows.append([_title(m, labels), _fmt(c["tau_pooled"]), _fmt(agg["mean_tau_over_datasets"][m]),
                     _pm(c["tokens_per_s"], c["tokens_per_s_std"], 1),
                     _pm(c["speedup"], c["speedup_std"], 2, "×"), _fmt(agg["mean_speedup_over_datasets"][m], 2),
                     str(c["new_tokens"]), str(c["rounds"])])
    out += [_md_table(["method", "τ (pooled)", "τ (mean of datasets)", "tokens/s", "speed-up (pooled)",
                       "speed-up (mean of datasets)", "new tokens", "rounds"], rows), ""]

    for title, key, digits, suffix in (("τ (mean acceptance length)", "tau", 2, ""),
                                       ("Speed-up over the faster plain decoder", "speedup", 2, "×"),
                                       ("Tokens per second", "tokens_per_s", 1, "")):
        out += [f"## {title} per dataset", ""]
        rows = []
        for m in methods:
            cells = []
            for s in scopes:
                c = t[m][s]
                cells.append(_fmt(c["tau_pooled"], digits) if key == "tau"
                             else _pm(c[key], c[key + "_std"], digits, suffix))
            if key == "tau":
                cells.append(_fmt(agg["mean_tau_over_datasets"][m], digits))
            rows.append([_title(m, labels)] + cells)
        extra = ["mean of datasets"] if key == "tau" else []
        out += [_md_table(["method"] + scopes + extra, rows), ""]

    if agg["vs_eagle"]:
        out += ["## Relative change over EAGLE (τ; tokens/s mean ± std over runs)", ""]
        rows = []
        for m, row in agg["vs_eagle"].items():
            cells = [f"τ {_fmt(row[s]['tau'], 1, True)}, speed {_fmt(row[s]['speed'], 1, True)}"
                     + ("" if math.isnan(row[s]["speed_std"]) else f" ± {row[s]['speed_std'] * 100:.1f}")
                     for s in scopes]
            mo = row["mean_over_datasets"]
            cells.append(f"τ {_fmt(mo['tau'], 1, True)}, speed {_fmt(mo['speed'], 1, True)}")
            rows.append([_title(m, labels)] + cells)
        out += [_md_table(["method"] + scopes + ["mean over datasets"], rows), ""]
        out += ["## τ over EAGLE with a 95% interval", "",
                "Paired bootstrap over questions (2,000 resamples; each dataset's questions drawn again with "
                "replacement, a question's turns and runs together): an interval that contains 0 means these "
                "questions cannot tell the two drafts apart. With a handful of questions per dataset the "
                "interval is rough and tends to be too narrow.", ""]
        rows = []
        for m, row in agg["vs_eagle"].items():
            cells = []
            for key in ("pooled", "mean_of_datasets"):
                change, lo, hi = row["tau_interval"][key]
                cells.append(f"{_fmt(change, 1, True)} ({_fmt(lo, 1, True)} to {_fmt(hi, 1, True)})")
            rows.append([_title(m, labels)] + cells)
        out += [_md_table(["method", "pooled τ", "τ (mean of datasets)"], rows), ""]

    depth = agg["depth"]
    if spec:
        for title, key in (("Conditional pos-acc (P(accept ≥ k) / P(accept ≥ k−1)), overall", "pos_acc"),
                           ("Unconditional rate P(accept ≥ k), overall", "pos_rate")):
            out += [f"## {title}", ""]
            rows = [[_title(m, labels)] + [_fmt(v * 100 if not math.isnan(v) else v, 1) for v in t[m][OVERALL][key]]
                    for m in spec]
            out += [_md_table(["method"] + [f"k={k}" for k in range(1, depth + 1)], rows), ""]
        out += ["## Accept-length histogram (rounds accepting exactly k draft tokens), overall", ""]
        rows = [[_title(m, labels)] + [str(v) for v in t[m][OVERALL]["accept_hist"]] for m in spec]
        out += [_md_table(["method"] + [str(k) for k in range(depth + 1)], rows), ""]
        out += ["## Feature deviation on accepted paths by position (mean L2 / cosine distance), overall", ""]
        rows = []
        for m in spec:
            fd = t[m][OVERALL]["feature_deviation"]
            cells = [f"{fd['l2'][k]:.3f} / {fd['cosine'][k]:.3f} (n={fd['count'][k]})" if k < len(fd["count"])
                     else "–" for k in range(depth)]
            rows.append([_title(m, labels)] + cells)
        out += [_md_table(["method"] + [f"k={k}" for k in range(1, depth + 1)], rows), ""]

    out += ["## Where the time goes per round (ms, mean ± std over runs), overall", "",
            "draft = building the draft tree (draft forwards included); verify = the target's forward over the tree "
            "and its LM head (a leaf's row read during acceptance included); "
            "overhead = the rest of the round (acceptance, cache commit, events), plus per decode the set-up before "
            "the first round and the closing summary.", ""]
    rows = []
    for m in methods:
        c = t[m][OVERALL]
        rows.append([_title(m, labels), _pm(c["draft_ms"], c["draft_ms_std"], 2),
                     _pm(c["verify_ms"], c["verify_ms_std"], 2), _pm(c["overhead_ms"], c["overhead_ms_std"], 2),
                     _pm(c["round_ms"], c["round_ms_std"], 2), _fmt(c["overhead_share"], 1, True).lstrip("+")])
    out += [_md_table(["method", "draft", "verify", "overhead", "round", "overhead share"], rows), ""]
    out += auto_expectation_section(agg, meta)
    return "\n".join(out)


def chosen_row(choice: dict[str, Any]) -> dict[str, Any] | None:
    """The row of a `BudgetChoice` table (as JSON) that `auto` picked."""
    for row in choice.get("table", []):
        if (row["budget"] == choice["budget"] and row.get("depth_stop", 0.0) == choice.get("depth_stop", 0.0)
                and (choice.get("depth") is None or row["depth"] == choice["depth"])):
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
        out.append({"method": m, "expected_tau": row["tau"], "tau": tau, "expected_round_ms": row["round_ms"],
                    "round_ms": round_ms, "expected_tokens_per_s": row["tokens_per_s"],
                    "rounds_only_tokens_per_s": 1000.0 * tau / round_ms if round_ms else math.nan,
                    "tokens_per_s": cell["tokens_per_s"], "expected_plain_tokens_per_s": choice["plain_tokens_per_s"]})
    return out


def auto_expectation_section(agg: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """The report's markdown for `auto_expectations`, with plain decoding's expected and measured step (none without
    `auto`)."""
    rows = auto_expectations(agg, meta)
    if not rows:
        return []
    labels = meta.get("labels", {})
    plain = agg["table"]["ar"][OVERALL] if "ar" in agg["methods"] else None
    plain_ms = plain["round_ms"] if plain else math.nan
    cells = [[_title(r["method"], labels), f"{r['expected_tau']:.2f}", f"{r['tau']:.2f}", f"{r['expected_round_ms']:.1f}",
              f"{r['round_ms']:.1f}", f"{r['expected_tokens_per_s']:.1f}", f"{r['rounds_only_tokens_per_s']:.1f}",
              f"{r['tokens_per_s']:.1f}"] for r in rows]
    cells.append(["plain (PlainDecoder)", "1.00", "1.00", f"{1000.0 / rows[0]['expected_plain_tokens_per_s']:.1f}",
                  _fmt(plain_ms, 1), f"{rows[0]['expected_plain_tokens_per_s']:.1f}",
                  _fmt(1000.0 / plain_ms if plain_ms else math.nan, 1),
                  _fmt(plain["tokens_per_s"], 1) if plain else "–"])
    return ["## `auto`: what it expected against what it got, overall", "",
            "Expected = the chosen setting's row of `auto`'s table (τ from the calibration prompts, round time from "
            "the forward-time curve and the calibration's draft and overhead times); measured = these questions. "
            "Measured tokens/s counts each decode's prefill, which the expectation leaves out; 1000·τ / round ms "
            "(\"rounds only\") is the comparable figure.", "",
            _md_table(["method", "τ expected", "τ measured", "round ms expected", "round ms measured",
                       "tokens/s expected", "tokens/s rounds only", "tokens/s with prefill"], cells), ""]


def _charts_html(events_by_label: dict[str, list[RoundEvent]], plotlyjs: str) -> tuple[list[str], str | None]:
    """The app's Plotly figures for these runs, as HTML fragments; (fragments, why not) when app.charts is missing."""
    try:
        from app import charts  # the app's figure builders: one set of charts for app and report
    except Exception as err:  # noqa: BLE001 - the report still has its tables
        return [], f"charts unavailable ({type(err).__name__}: {err})"
    builders = [("Conditional pos-acc by position", lambda r: charts.pos_acc_figure(r, conditional=True)),
                ("Unconditional acceptance rate by position", lambda r: charts.pos_acc_figure(r, conditional=False)),
                ("Accept-length histogram", charts.accept_hist_figure),
                ("Feature deviation by position", charts.feature_deviation_figure),
                ("Tokens per second", charts.tokens_per_s_figure)]
    parts, include = [], plotlyjs
    for title, build in builders:
        try:
            fig = build(events_by_label)
        except Exception as err:  # noqa: BLE001 - one broken chart must not lose the report
            parts.append(f"<p>{html.escape(title)}: not drawn ({html.escape(type(err).__name__)}: "
                         f"{html.escape(str(err))})</p>")
            continue
        parts.append(f"<h3>{html.escape(title)}</h3>" + fig.to_html(full_html=False, include_plotlyjs=include))
        include = False
    return parts, None


def _md_to_html(md: str) -> str:
    """Enough markdown for the report's own output: headings, tables, code blocks, bullets, quotes, bold."""
    out, in_code, in_table = [], False, False
    for line in md.splitlines():
        if line.startswith("```"):
            out.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
            continue
        if in_code:
            out.append(html.escape(line))
            continue
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(set(c) <= {"-"} and c for c in cells):
                continue
            if not in_table:
                out.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cells) + "</tr>")
                in_table = True
            else:
                out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            out.append("</table>")
            in_table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{html.escape(line[level:].strip())}</h{level}>")
        elif line.startswith("- "):
            out.append(f"<li>{html.escape(line[2:])}</li>")
        elif line.startswith("> "):
            out.append(f"<blockquote>{html.escape(line[2:])}</blockquote>")
        elif line.startswith("**") and line.endswith("**"):
            out.append(f"<p class='alarm'>{html.escape(line.strip('*'))}</p>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    if in_table:
        out.append("</table>")
    return "\n".join(out)


def html_report(markdown: str, events_by_label: dict[str, list[RoundEvent]], plotlyjs: str | bool = True) -> str:
    """A standalone page: the markdown tables, then the app's charts (plotly.js inlined by default: works offline)."""
    charts, why_not = _charts_html(events_by_label, plotlyjs)
    style = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;"
             "text-align:right}th:first-child,td:first-child{text-align:left}pre{background:#f4f4f4;padding:.6em;"
             "white-space:pre-wrap}.alarm{background:#b00020;color:#fff;padding:1em;font-size:1.3em;font-weight:bold}")
    body = _md_to_html(markdown)
    body += "\n<h2>Charts (overall, all runs pooled)</h2>\n"
    body += "\n".join(charts) if charts else f"<p>{html.escape(why_not or 'no charts')}</p>"
    return f"<!doctype html><html><head><meta charset='utf-8'><title>POSS benchmark</title><style>{style}</style>" \
           f"</head><body>{body}</body></html>"


def clean_json(obj):
    """JSON without NaN (missing values become null)."""
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return obj


def write_outputs(out_dir: Path, records: Sequence[TurnRecord], meta: dict[str, Any], depth: int,
                  identity: dict[str, Any] | None = None, plotlyjs: str | bool = True) -> dict[str, Path]:
    """Write records.jsonl, one Spec-Bench JSONL per method, summary.json, report.md and report.html."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    agg = aggregate(records, depth)
    if identity is None:
        identity = identity_check(records)
    paths: dict[str, Path] = {}
    with open(out_dir / "records.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(clean_json(r.to_json())) + "\n")
    paths["records"] = out_dir / "records.jsonl"
    for m in agg["methods"]:
        p = out_dir / f"{m}.jsonl"
        with open(p, "w") as f:
            for row in spec_bench_rows(records, m, meta.get("model_id", "model")):
                f.write(json.dumps(clean_json(row)) + "\n")
        paths[m] = p
    summary = {"meta": meta, "identity": identity, **agg}
    (out_dir / "summary.json").write_text(json.dumps(clean_json(summary), indent=1))
    paths["summary"] = out_dir / "summary.json"
    md = markdown_report(agg, identity, meta)
    (out_dir / "report.md").write_text(md + "\n")
    paths["markdown"] = out_dir / "report.md"
    labels = meta.get("labels", {})
    events = {_title(m, labels): ev for m, ev in pooled_events_by_method(records, agg["methods"]).items()}
    (out_dir / "report.html").write_text(html_report(md, events, plotlyjs))
    paths["html"] = out_dir / "report.html"
    return paths


def read_records(path: Path) -> list[TurnRecord]:
    with open(path) as f:
        return [TurnRecord.from_json(json.loads(line)) for line in f if line.strip()]
