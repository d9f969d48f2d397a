"""The four charts' sources: this run, all my runs (this tab's pooled runs), or everyone on this server (the class
pool), drawn by poss_core/views/figures.py."""

from __future__ import annotations

import time
from typing import Any

from app.server import class_pool
from app.server.class_pool import CLASS, ClassEntry
from app.sessions import machine, state, tab_pools
from app.sessions.state import Session
from app.sessions.tab_pools import Pools
from app.sessions.user_settings import View
from poss_core.models.presets import DEFAULT_PRESET
from poss_core.runtime import methods
from poss_core.runtime.compare import Comparison
from poss_core.views import figures


def chart_runs(comp: Comparison | None) -> tuple[dict[str, list], dict[str, str]]:
    if comp is None:
        return {}, {}
    runs_, colors = {}, {}
    for lane in comp.lanes:
        name = lane.short
        runs_[name] = lane.events
        colors[name] = methods.color_of(lane.method) or methods.OKABE_ITO[len(colors) % 7]
    return runs_, colors


def pool_note(pools: Pools) -> str:
    """The pooled charts' second subtitle line: how many runs, whether their settings differ, whether the cap cut
    the oldest rounds (the rounds themselves are each chart's n=)."""
    if not pools:
        return ""
    counts = {p.label: len(p.runs) for p in pools.values()}
    if len(set(counts.values())) == 1:
        n = next(iter(counts.values()))
        runs = f"{n} run{'s' if n != 1 else ''}"
    else:
        runs = "runs " + ", ".join(f"{label} {n}" for label, n in counts.items())
    parts = [f"All my runs: {runs} pooled"]
    varied = list(dict.fromkeys(k for p in pools.values() for k in p.varied()))
    if varied:
        parts.append(f"settings varied across runs ({', '.join(varied)})")
    if any(p.dropped for p in pools.values()):
        parts.append(f"capped: the latest {tab_pools.POOL_ROUNDS:,} rounds per method, the oldest dropped")
    return "; ".join(parts)


def pooled_chart_runs(pools: Pools) -> tuple[dict[str, list], dict[str, str], str]:
    """The charts' runs for "All my runs": one pooled event stream per method (plain decoding first), their
    colours, and the note that says what was pooled."""
    order = sorted(pools, key=lambda m: m != methods.PLAIN)
    runs_ = {pools[m].label: pools[m].events() for m in order}
    colors = {pools[m].label: methods.color_of(m) or methods.OKABE_ITO[i % 7] for i, m in enumerate(order)}
    return runs_, colors, pool_note(pools)


CHART_NAMES = ("pos_acc", "feature_deviation", "accept_hist", "tokens_per_s")


def chart_outputs(session: Session, view: View) -> dict[str, Any]:
    """The four charts, keyed by name (CHART_NAMES), of what the view's source asks for: this run, all my runs, or
    everyone on this server."""
    comp = session.comparison
    if view.everyone:
        return class_charts(session, view)
    runs_, colors, note = pooled_chart_runs(session.pool_view(comp)) if view.pooled else (*chart_runs(comp), "")
    tps = figures.tokens_per_s_figure(runs_, colors=colors, note="; ".join(x for x in (note, speed_note(comp)) if x))
    return _charts(runs_, colors, note, view.conditional, tps)


def speed_note(comp: Comparison | None) -> str:
    """Where the tokens/s chart's speeds were measured: live on this machine or recorded on another, with the
    precision and the draft lanes' tree."""
    if comp is None:
        return ""
    trees = list(dict.fromkeys(t for t in (machine.tree_of(comp, lane) for lane in comp.lanes) if t))
    where = f"recorded on {machine.machine_of(comp)}" if comp.replay else f"live on {machine.machine_of(comp)}"
    return ", ".join([where, machine.precision_of(comp), *trees])


def _charts(runs_: dict, colors: dict, note: str, conditional: bool, tokens_per_s: Any) -> dict[str, Any]:
    """The four charts keyed by CHART_NAMES: three drawn from `runs_` alike, and the tokens/s chart as given."""
    return dict(
        zip(
            CHART_NAMES,
            (
                figures.pos_acc_figure(runs_, conditional=conditional, colors=colors, note=note),
                figures.feature_deviation_figure(runs_, colors=colors, note=note),
                figures.accept_hist_figure(runs_, colors=colors, note=note),
                tokens_per_s,
            ),
        )
    )


def class_group(session: Session) -> tuple[str, class_pool.Settings | None]:
    """The preset and settings the class charts show: the live run's on show, else (no lanes, a replay or a loaded
    run, which may come from another machine's preset) the app's first preset at the settings most runs used."""
    comp = session.comparison
    if comp is not None and not comp.replay:
        return comp.spec.preset, class_pool.settings_of(comp.spec)
    return state.APP_PRESET or DEFAULT_PRESET, None


def class_note(preset: str, entries: dict[str, ClassEntry], settings: class_pool.Settings | None = None) -> str:
    """The class charts' second subtitle line: whose runs at which settings, how many per method, since when, and
    how many runs at other settings are pooled apart."""
    since = time.strftime("%H:%M UTC", time.gmtime(CLASS.since))
    groups = CLASS.groups(preset)
    settings = settings if settings is not None else next(iter(groups), None)
    at = f" at {class_pool.describe(settings)}" if settings is not None else ""
    if not entries:
        return f"Everyone on this server ({preset}){at}: no finished live run yet (since {since})"
    runs = ", ".join(f"{e.label} {e.runs}" for e in entries.values())
    apart = sum(n for s, n in groups.items() if s != settings)
    other = f"; {apart} run{'s' if apart != 1 else ''} at other settings pooled apart" if apart else ""
    return f"Everyone on this server ({preset}){at}, live runs pooled since {since}: {runs}{other}"


def class_charts(session: Session, view: View) -> dict[str, Any]:
    """ "Everyone on this server": each method's pooled AcceptanceStats on the preset (numbers only) drawn by the
    same chart code, n= on each chart; tokens/s as pooled totals (the pool keeps no per-round timeline)."""
    preset, settings = class_group(session)
    entries = CLASS.view(preset, settings)
    order = sorted(entries, key=lambda m: m != methods.PLAIN)
    entries = {m: entries[m] for m in order}
    runs_ = {e.label: e.stats for e in entries.values()}
    colors = {e.label: methods.color_of(m) or methods.OKABE_ITO[i % 7] for i, (m, e) in enumerate(entries.items())}
    note = class_note(preset, entries, settings)
    session.class_seen = (CLASS.version, view.conditional)
    speeds = " · ".join(
        f"{e.label} {e.tokens_per_s:.1f} ({e.tokens:,} tokens, {e.runs} runs)"
        for e in entries.values()
        if e.seconds > 0
    )
    tps = figures.empty_figure(
        f"Pooled tokens/s: {speeds}" if speeds else "No finished live run yet.",
        340,
        f"Tokens/s, everyone on this server ({machine.cpu_name()}; tokens over the lanes' own compute time)",
    )
    return _charts(runs_, colors, note, view.conditional, tps)
