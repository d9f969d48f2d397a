"""The Evidence tab's HTML: where a summary's figures come from (command, hardware, sample sizes), the table of
methods with their 95% intervals, and the status line. Text from a loaded file is escaped everywhere."""

from __future__ import annotations

import html
import math

from poss_core.results.analysis import OVERALL
from poss_core.results.evidence import Evidence
from poss_core.results.evidence_schema import Spread


def _fmt(v: float, digits: int = 2) -> str:
    return "–" if v is None or math.isnan(v) else f"{v:.{digits}f}"


def _interval_text(e, digits: int = 2, pct: bool = False) -> str:
    if math.isnan(e.value):
        return "–"
    if pct:
        return f"{e.value * 100:+.1f}% ({e.low * 100:+.1f} to {e.high * 100:+.1f})"
    if math.isnan(e.low) or (e.low == e.value == e.high):
        return _fmt(e.value, digits)
    return f"{e.value:.{digits}f} ({e.low:.{digits}f}–{e.high:.{digits}f})"


def header_html(ev: Evidence, source: str) -> str:
    """Where the figures come from: the command, the hardware, the date, the settings and the sample sizes."""
    m = ev.meta
    questions = ev.questions()
    rounds = ", ".join(
        f"{info.short} {ev.results[info.name].scopes[OVERALL].rounds}"
        for info in ev.draft_methods()
        if OVERALL in ev.results[info.name].scopes
    )
    identity = ev.identity
    check = (
        f"{identity.checked} turns compared with {identity.reference}: {identity.mismatches} mismatches, "
        f"{identity.near_ties} rounding near-ties"
        if identity.reference
        else "not run"
    )
    facts = [
        ("source", source),
        ("command", m.command),
        ("summary written by", m.summary_command if m.summary_command != m.command else ""),
        ("hardware", m.hardware),
        ("software", m.software),
        ("target", m.target),
        ("date", m.date),
        ("commit", m.git_commit or ""),
        ("settings", m.settings),
        ("tree budget", m.budget),
        ("questions", f"{sum(questions.values())} (" + ", ".join(f"{d} {n}" for d, n in questions.items()) + ")"),
        ("draft rounds", rounds),
        ("identity check", check),
    ]
    commands = ("command", "summary written by")
    rows = "".join(
        f"<li><b>{html.escape(k)}</b>: {_code(v) if k in commands else html.escape(v)}</li>" for k, v in facts if v
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in m.notes)
    return (
        f'<div class="poss-evidence-header"><b>{html.escape(ev.preset)}</b>, depth {ev.depth}'
        f"<ul>{rows}{notes}</ul></div>"
    )


def _code(text: str) -> str:
    return f"<code>{html.escape(text)}</code>"


def machine_of(ev: Evidence) -> str:
    """The machine a summary's speeds were measured on, in a few words ("AMD EPYC")."""
    return (ev.meta.hardware or "an unnamed machine").split(",")[0].removeprefix("cpu:").strip()


def table_html(ev: Evidence) -> str:
    """One row per method: τ with 95% intervals, τ over EAGLE, speed-up and tokens/s over runs (their headers naming
    the machine, tree and precision they were measured with), the sample sizes."""
    m = ev.meta
    where = f"{machine_of(ev)}, {m.run_settings.get('tree_budget', '?')}-node tree, {m.dtype or '?'}"
    head = [
        "method",
        "τ, mean of datasets (95%)",
        "τ pooled (95%)",
        "τ vs EAGLE, mean of datasets (95%)",
        "τ vs HASS control, mean of datasets (95%)",
        f"speed-up (± std), {where}",
        f"tokens/s (± std), {where}",
        "drafting ms/round (± std)",
        "runs",
        "draft rounds",
        "questions",
    ]
    rows = []
    for info in ev.methods:
        result = ev.results.get(info.name)
        if result is None or OVERALL not in result.scopes:
            continue
        cell = result.scopes[OVERALL]
        speed, tps = cell.speedup.estimate(), cell.tokens_per_s.estimate()
        speed_std, tps_std = speed.high - speed.value, tps.high - tps.value  # 0: a single run, no spread
        vs = result.tau_vs_eagle.estimate() if result.tau_vs_eagle else None
        vs_hass = result.tau_vs_hass.estimate() if result.tau_vs_hass else None
        cells = [
            info.label if info.trained else f"{info.label} (untrained)",
            "1 (plain)" if info.plain else _interval_text(result.tau_mean_of_datasets.estimate()),
            "" if info.plain else _interval_text(cell.tau.estimate()),
            _interval_text(vs, pct=True) if vs else "",
            _interval_text(vs_hass, pct=True) if vs_hass else "",
            f"×{_fmt(speed.value)}" + (f" ± {_fmt(speed_std)}" if speed_std else ""),
            _fmt(tps.value, 1) + (f" ± {_fmt(tps_std, 1)}" if tps_std else ""),
            _drafting_text(cell.draft_ms, info.plain),
            str(speed.n),
            "" if info.plain else str(cell.rounds),
            str(cell.questions),
        ]
        swatch = f'<span style="color:{info.color}">■</span> '
        rows.append(
            "<tr>"
            + "".join(f"<td>{swatch if i == 0 else ''}{html.escape(c)}</td>" for i, c in enumerate(cells))
            + "</tr>"
        )
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (
        f'<table class="poss-evidence-table" style="border-collapse:collapse;font-size:0.9em">'
        f"<tr>{th}</tr>{''.join(rows)}</table>"
    )


def _drafting_text(draft_ms: Spread | None, plain: bool) -> str:
    """A draft's tree-building time per round (mean ± std over runs); blank for plain decoding and for summaries
    written before it was kept, "–" where it was not timed apart (0: prompt lookup's n-gram search)."""
    if plain or draft_ms is None:
        return ""
    if not draft_ms.mean:
        return "–"
    est = draft_ms.estimate()
    spread = est.high - est.value
    return _fmt(est.value, 1) + (f" ± {_fmt(spread, 1)}" if spread else "")


def message_html(text: str, kind: str) -> str:
    """The tab's status line: what is shown, or why a load failed (text from a file shows as text)."""
    icon = "⚠ " if kind == "error" else ""
    return f'<div class="poss-status {kind}">{icon}{html.escape(text, quote=False)}</div>'
