"""The benchmark report's tables in markdown: the identity check, the facts of the run, τ, speed-ups and tokens/s
(overall, per dataset, against EAGLE and between drafts), acceptance and feature deviation by position, where the
time goes, and what `auto` expected against what it got."""

from __future__ import annotations

import math
from typing import Any

from ..results.analysis import OVERALL, auto_expectations
from ..runtime.methods import PLAIN, TRAINING_FREE, is_plain, label_of


def identity_banner(identity: dict[str, Any]) -> str:
    n = len(identity["mismatches"])
    ties = identity.get("near_ties") or []
    if identity.get("skipped"):
        return f"Identity check skipped: {identity['skipped']}."
    if identity["reference"] is None:
        return "Identity check not run: no plain-decoding method in --methods."
    why = f" ({identity['numerics']})" if identity.get("numerics") else ""
    if n == 0 and not ties:
        return (
            f"Identity check PASSED: every method's output equals {identity['reference']} token for token "
            f"on {identity['checked']} turns{why}."
        )
    if n == 0:
        first = sum(1 for m in ties if m["kind"] == "near-tie")
        how = (
            ""
            if identity.get("numerics")
            else f" (a near-tie that {identity.get('precision') or 'this precision'} "
            f"rounds differently in a batched verify pass and a one-token step)"
        )
        return (
            f"Identity check PASSED up to rounding: {identity['checked'] - len(ties)} of {identity['checked']} "
            f"turns equal {identity['reference']} token for token; {first} first differ where the plain "
            f"target's logits for the two tokens are within {identity['tolerance']:g} of each other{how}, and "
            f"{len(ties) - first} only after such a divergence in an earlier turn. No real mismatch{why}."
        )
    methods = sorted({m["method"] for m in identity["mismatches"]})
    extra = f" ({len(ties)} more differ only at rounding near-ties)" if ties else ""
    return (
        f"!!! IDENTITY CHECK FAILED: {n} of {identity['checked']} turns differ from {identity['reference']} "
        f"({', '.join(methods)}){extra}. At temperature 0 speculative decoding must reproduce plain decoding "
        f"exactly: this is a bug{why}. !!!"
    )


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


def method_title(method: str, labels: dict[str, str]) -> str:
    """A method's name in the report: the run's label for it, else the registry's."""
    return labels.get(method) or label_of(method)


def markdown_report(agg: dict[str, Any], identity: dict[str, Any], meta: dict[str, Any]) -> str:
    """The benchmark's tables in markdown, with the command, hardware and date that produced them."""
    labels = meta.get("labels", {})
    out = header_section(agg, identity, meta)
    out += overall_section(agg, labels)
    out += per_dataset_sections(agg, labels)
    out += vs_eagle_sections(agg, labels)
    out += between_drafts_section(agg, labels)
    out += by_position_sections(agg, labels)
    out += time_split_section(agg, labels)
    out += auto_expectation_section(agg, meta)
    return "\n".join(out)


def header_section(agg: dict[str, Any], identity: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """Title, the identity check (loud when it failed), the command, the facts of the run and how to read it."""
    methods = agg["methods"]
    out: list[str] = [f"# POSS benchmark: {meta.get('preset', '')}", ""]
    banner = identity_banner(identity)
    out += [f"**{banner}**" if identity["mismatches"] else banner, ""]
    listed = identity["mismatches"] + (identity.get("near_ties") or [])
    if listed:
        rows = [
            [
                m["method"],
                str(m["run"]),
                m["dataset"],
                str(m["question_id"]),
                str(m["turn"]),
                str(m["index"]),
                str(m["got"]),
                str(m["want"]),
                _fmt(m.get("margin"), 4),
                m.get("kind", "mismatch"),
            ]
            for m in listed[:50]
        ]
        out += [
            _md_table(
                [
                    "method",
                    "run",
                    "dataset",
                    "question",
                    "turn",
                    "first diff",
                    "got",
                    "want",
                    "plain logit margin",
                    "kind",
                ],
                rows,
            ),
            "",
        ]
    out += ["```", meta.get("command", ""), "```", ""]
    facts = [
        ("date", meta.get("date")),
        ("hardware", meta.get("hardware")),
        ("software", meta.get("software")),
        ("target", meta.get("target")),
        ("settings", meta.get("settings")),
        ("tree budget", meta.get("budget")),
        ("questions", meta.get("questions")),
    ]
    out += [f"- {k}: {v}" for k, v in facts if v] + [""]
    for note in meta.get("notes", []):
        out.append(f"> {note}")
    if meta.get("notes"):
        out.append("")
    out += [
        f"Speed-up = tokens/s ÷ tokens/s of the fastest plain decoder "
        f"({', '.join(m for m in methods if is_plain(m))}) on the same "
        f"run and dataset; mean ± sample std over {len(agg['runs'])} run(s). τ = mean (accept_len + 1) per "
        f"draft round, counted up to the answer's end; pooled = over every round of every dataset, mean of "
        f"datasets = the average of the datasets' τ (the paper's mean column).",
        "",
    ]
    free = [m for m in methods if m in TRAINING_FREE]
    if free:
        out += [
            f"{', '.join(free)}: transformers' own speculative `generate` with no trained draft (prompt lookup; "
            f"a smaller model of the preset), at most depth candidates per round. Its streamer shows only what "
            f"each target forward kept, so τ and acceptance by position come from accept lengths (a round whose "
            f"lookup found nothing counts as accepting 0); rejected candidates, draft probabilities and feature "
            f"deviation are not observable (–), and its draft time is the assistant's forward passes (prompt "
            f"lookup's n-gram search is not timed apart).",
            "",
        ]
    return out


def overall_section(agg: dict[str, Any], labels: dict[str, str]) -> list[str]:
    oracle = agg.get("oracle")
    rows = []
    for m in agg["methods"]:
        c = agg["table"][m][OVERALL]
        fraction = (
            [
                _pm(c["oracle_fraction"], c["oracle_fraction_std"], 2),
                _fmt(agg["mean_oracle_fraction_over_datasets"][m], 2),
            ]
            if oracle
            else []
        )
        rows.append(
            [
                method_title(m, labels),
                _fmt(c["tau_pooled"]),
                _fmt(agg["mean_tau_over_datasets"][m]),
                _pm(c["tokens_per_s"], c["tokens_per_s_std"], 1),
                _pm(c["speedup"], c["speedup_std"], 2, "×"),
                _fmt(agg["mean_speedup_over_datasets"][m], 2),
                *fraction,
                str(c["new_tokens"]),
                str(c["rounds"]),
            ]
        )
    header = [
        "method",
        "τ (pooled)",
        "τ (mean of datasets)",
        "tokens/s",
        "speed-up (pooled)",
        "speed-up (mean of datasets)",
    ]
    if oracle:
        header += ["of the oracle's speed-up (pooled)", "of the oracle's (mean of datasets)"]
    out = ["## Overall", ""]
    if oracle:
        out += [
            f"The oracle ({method_title(oracle, labels)}) proposes the target's own continuation, so every round "
            f"accepts up to the depth: its speed-up is the most any draft can reach with this engine on this "
            f"machine at these settings. \"Of the oracle's\" = a method's tokens/s ÷ the oracle's in the same "
            f"run (= its speed-up ÷ the oracle's).",
            "",
        ]
    return out + [_md_table(header + ["new tokens", "rounds"], rows), ""]


def per_dataset_sections(agg: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """τ, speed-up and tokens/s, one table each, a column per dataset."""
    t, scopes = agg["table"], agg["datasets"] + [OVERALL]
    out: list[str] = []
    tables = [
        ("τ (mean acceptance length)", "tau", 2, ""),
        ("Speed-up over the faster plain decoder", "speedup", 2, "×"),
        ("Tokens per second", "tokens_per_s", 1, ""),
    ]
    if agg.get("oracle"):
        tables.insert(2, ("Speed-up as a fraction of the oracle's", "oracle_fraction", 2, ""))
    for title, key, digits, suffix in tables:
        out += [f"## {title} per dataset", ""]
        rows = []
        for m in agg["methods"]:
            cells = []
            for s in scopes:
                c = t[m][s]
                cells.append(
                    _fmt(c["tau_pooled"], digits) if key == "tau" else _pm(c[key], c[key + "_std"], digits, suffix)
                )
            if key == "tau":
                cells.append(_fmt(agg["mean_tau_over_datasets"][m], digits))
            rows.append([method_title(m, labels)] + cells)
        extra = ["mean of datasets"] if key == "tau" else []
        out += [_md_table(["method"] + scopes + extra, rows), ""]
    return out


def vs_eagle_sections(agg: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """Every other draft's change over EAGLE, and τ's change with its bootstrap interval (none without EAGLE)."""
    if not agg["vs_eagle"]:
        return []
    scopes = agg["datasets"] + [OVERALL]
    out = ["## Relative change over EAGLE (τ; tokens/s mean ± std over runs)", ""]
    rows = []
    for m, row in agg["vs_eagle"].items():
        cells = [
            f"τ {_fmt(row[s]['tau'], 1, True)}, speed {_fmt(row[s]['speed'], 1, True)}"
            + ("" if math.isnan(row[s]["speed_std"]) else f" ± {row[s]['speed_std'] * 100:.1f}")
            for s in scopes
        ]
        mo = row["mean_over_datasets"]
        cells.append(f"τ {_fmt(mo['tau'], 1, True)}, speed {_fmt(mo['speed'], 1, True)}")
        rows.append([method_title(m, labels)] + cells)
    out += [_md_table(["method"] + scopes + ["mean over datasets"], rows), ""]
    out += [
        "## τ over EAGLE with a 95% interval",
        "",
        "Paired bootstrap over questions (2,000 resamples; each dataset's questions drawn again with "
        "replacement, a question's turns and runs together): an interval that contains 0 means these "
        "questions cannot tell the two drafts apart. With a handful of questions per dataset the "
        "interval is rough and tends to be too narrow.",
        "",
    ]
    rows = []
    for m, row in agg["vs_eagle"].items():
        cells = []
        for key in ("pooled", "mean_of_datasets"):
            change, lo, hi = row["tau_interval"][key]
            cells.append(f"{_fmt(change, 1, True)} ({_fmt(lo, 1, True)} to {_fmt(hi, 1, True)})")
        rows.append([method_title(m, labels)] + cells)
    return out + [_md_table(["method", "pooled τ", "τ (mean of datasets)"], rows), ""]


def between_drafts_section(agg: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """τ's change of each draft (row) over each other draft (column), mean of datasets, with its paired-bootstrap
    interval: the comparisons between drafts trained alike (POSS-n against POSS-m, POSS against hass)."""
    between = agg.get("tau_between") or {}
    if len(between) < 2:
        return []
    drafts = list(between)
    rows = []
    for m in drafts:
        cells = []
        for b in drafts:
            if b == m:
                cells.append("")
                continue
            change, lo, hi = between[m][b]
            cells.append(f"{_fmt(change, 1, True)} ({_fmt(lo, 1, True)} to {_fmt(hi, 1, True)})")
        rows.append([method_title(m, labels)] + cells)
    return [
        "## τ of each draft (row) over each other (column), mean of datasets, with a 95% interval",
        "",
        "The same paired bootstrap over questions as above, for every pair of drafts.",
        "",
        _md_table(["method"] + [method_title(b, labels) for b in drafts], rows),
        "",
    ]


def by_position_sections(agg: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """Pos-acc, the unconditional rate, the accept-length histogram and feature deviation of the drafts, overall."""
    t, depth = agg["table"], agg["depth"]
    spec = [m for m in agg["methods"] if not is_plain(m)]
    if not spec:
        return []
    out: list[str] = []
    for title, key in (
        ("Conditional pos-acc (of rounds that accepted k−1 and drafted k, the share accepting k), overall", "pos_acc"),
        ("Unconditional rate (of rounds that drafted k, the share accepting ≥ k), overall", "pos_rate"),
        ("Share of rounds that drafted position k, overall", "drafted_share"),
    ):
        out += [f"## {title}", ""]
        rows = [
            [method_title(m, labels)] + [_fmt(v * 100 if not math.isnan(v) else v, 1) for v in t[m][OVERALL][key]]
            for m in spec
        ]
        out += [_md_table(["method"] + [f"k={k}" for k in range(1, depth + 1)], rows), ""]
    out += ["## Accept-length histogram (rounds accepting exactly k draft tokens), overall", ""]
    rows = [[method_title(m, labels)] + [str(v) for v in t[m][OVERALL]["accept_hist"]] for m in spec]
    out += [_md_table(["method"] + [str(k) for k in range(depth + 1)], rows), ""]
    kinds = (
        ("along the target's continuation, from every position", lambda c: c["deviation"]["every_position"]),
        ("along the target's continuation, from round roots only", lambda c: c["deviation"]["continuation"]),
        ("on tree nodes off the accepted path", lambda c: c["deviation"]["tree_off_path"]),
        ("on tree nodes on the accepted path", lambda c: c["deviation"]["tree_on_path"]),
        ("on accepted positions only (conditional on acceptance)", lambda c: c["feature_deviation"]),
    )
    for title, pick in kinds:
        out += [f"## Feature deviation {title}, by position (mean L2 / cosine distance), overall", ""]
        rows = []
        for m in spec:
            fd = pick(t[m][OVERALL])
            cells = [
                f"{fd['l2'][k]:.3f} / {fd['cosine'][k]:.3f} (n={fd['count'][k]})"
                if k < len(fd["count"]) and fd["count"][k]
                else "–"
                for k in range(depth)
            ]
            rows.append([method_title(m, labels)] + cells)
        out += [_md_table(["method"] + [f"k={k}" for k in range(1, depth + 1)], rows), ""]
    return out


def time_split_section(agg: dict[str, Any], labels: dict[str, str]) -> list[str]:
    out = [
        "## Where the time goes per round (ms, mean ± std over runs), overall",
        "",
        "draft = building the draft tree (draft forwards included); verify = the target's forward over the tree "
        "and its LM head (a leaf's row read during acceptance included); "
        "overhead = the rest of the round (acceptance, cache commit, events), plus per decode the set-up before "
        "the first round and the closing summary.",
        "",
    ]
    rows = []
    for m in agg["methods"]:
        c = agg["table"][m][OVERALL]
        rows.append(
            [
                method_title(m, labels),
                _pm(c["draft_ms"], c["draft_ms_std"], 2),
                _pm(c["verify_ms"], c["verify_ms_std"], 2),
                _pm(c["overhead_ms"], c["overhead_ms_std"], 2),
                _pm(c["round_ms"], c["round_ms_std"], 2),
                _fmt(c["overhead_share"], 1, True).lstrip("+"),
            ]
        )
    return out + [_md_table(["method", "draft", "verify", "overhead", "round", "overhead share"], rows), ""]


def auto_expectation_section(agg: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """The report's markdown for `auto_expectations`, with plain decoding's expected and measured step (none without
    `auto`)."""
    rows = auto_expectations(agg, meta)
    if not rows:
        return []
    labels = meta.get("labels", {})
    plain = agg["table"][PLAIN][OVERALL] if PLAIN in agg["methods"] else None
    plain_ms = plain["round_ms"] if plain else math.nan
    cells = [
        [
            method_title(r["method"], labels),
            f"{r['expected_tau']:.2f}",
            f"{r['tau']:.2f}",
            f"{r['expected_round_ms']:.1f}",
            f"{r['round_ms']:.1f}",
            f"{r['expected_tokens_per_s']:.1f}",
            f"{r['rounds_only_tokens_per_s']:.1f}",
            f"{r['tokens_per_s']:.1f}",
        ]
        for r in rows
    ]
    cells.append(
        [
            method_title(PLAIN, labels),
            "1.00",
            "1.00",
            f"{1000.0 / rows[0]['expected_plain_tokens_per_s']:.1f}",
            _fmt(plain_ms, 1),
            f"{rows[0]['expected_plain_tokens_per_s']:.1f}",
            _fmt(1000.0 / plain_ms if plain_ms else math.nan, 1),
            _fmt(plain["tokens_per_s"], 1) if plain else "–",
        ]
    )
    return [
        "## `auto`: what it expected against what it got, overall",
        "",
        "Expected = the chosen setting's row of `auto`'s table (τ from the calibration prompts, round time from "
        "the forward-time curve and the calibration's draft and overhead times); measured = these questions. "
        "Measured tokens/s counts each decode's prefill, which the expectation leaves out; 1000·τ / round ms "
        '("rounds only") is the comparable figure.',
        "",
        _md_table(
            [
                "method",
                "τ expected",
                "τ measured",
                "round ms expected",
                "round ms measured",
                "tokens/s expected",
                "tokens/s rounds only",
                "tokens/s with prefill",
            ],
            cells,
        ),
        "",
    ]
