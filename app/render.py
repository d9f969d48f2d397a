"""What the page shows: each emitted token as an escaped span coloured by how it came (tooltips, legend, badges),
the lane headers, trees and charts, the status line; `render` assembles every output of a handler."""

from __future__ import annotations

import html
import math
import time
from typing import Any

import gradio as gr

from poss_core import methods, metrics
from poss_core.compare import MAX_LANES, Comparison, Lane, TokenRecord
from poss_core.explain import explain_round
from poss_core.model_cache import MODELS
from poss_core.models.hardware import hardware_info
from poss_core.models.numerics import NEAR_TIE, Divergence
from poss_core.models.presets import DEFAULT_PRESET, Preset
from poss_core.views import figures

from . import about, state
from .class_pool import CLASS, ClassEntry
from .server_text import neutral_paths
from .state import DEFAULT_METHODS, Pools, Session, View

MAX_SHADES = 8  # draft positions and specialists beyond this reuse the last shade


def _p(value: float | None) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def tooltip(rec: TokenRecord) -> str:
    head = f"round {rec.round}"
    if rec.from_draft and rec.specialist is None:  # a candidate of transformers' generate (prompt lookup, assisted)
        return (
            f"{head} · accepted candidate token\ndraft position {rec.position}\nits draft probability and the "
            f"candidates rejected after it are not observable through transformers' generate"
        )
    if rec.from_draft:
        return (
            f"{head} · accepted draft token\ndraft position {rec.position} · specialist S{(rec.specialist or 0) + 1}"
            f"\ndraft p {_p(rec.draft_prob)} · target p {_p(rec.target_prob)}"
        )
    what = {
        "prefill": "the target's first token (prefill: nothing drafted)",
        "plain": "the target's token (plain decoding)",
        "bonus": f"the target's bonus token after {rec.position - 1} accepted",
        "corrected": f"the target's token at position {rec.position}: it corrected the draft",
    }[rec.source]
    lines = [f"{head} · {what}"]
    if rec.rejected:
        lines.append(
            "rejected drafts here: "
            + "; ".join(
                f"{r.text!r} (draft p {_p(r.draft_prob)}, target p {_p(r.target_prob)})" for r in rec.rejected[:5]
            )
        )
    return "\n".join(lines)


def _shown(text: str) -> str:
    """Escaped token text; a newline also shows a visible mark so whitespace tokens stay visible."""
    escaped = html.escape(text, quote=False)
    return escaped.replace("\n", '<span class="nl">↵</span>\n')


def tokens_html(
    records: list[TokenRecord], color_by: str = "position", show_rejected: bool = False, placeholder: str = ""
) -> str:
    """The coloured token view. `color_by` is "position" (shade by draft position) or "specialist".

    Every token carries its round (`data-round`): clicking one picks that round in the lane's tree (TOKEN_CLICK_JS).
    The first token of each round is focusable, so Tab walks the rounds and Enter picks one."""
    mode = "by-specialist" if color_by == "specialist" else "by-position"
    parts = [f'<div class="poss-tokens {mode}{"" if show_rejected else " hide-rej"}">']
    if not records and placeholder:
        parts.append(f'<span class="poss-placeholder">{html.escape(placeholder)}</span>')
    last_round = None
    for rec in records:
        title = html.escape(tooltip(rec), quote=True)
        data = f' data-round="{int(rec.round)}"'
        if rec.rejected:
            best = rec.rejected[0]
            parts.append(f'<s class="rej"{data} title="{title}">{_shown(best.text)}</s>')
        if rec.round != last_round:
            data += ' tabindex="0"'
            last_round = rec.round
        text = rec.text or ("⟨special⟩" if rec.special else "")
        if rec.from_draft:
            p = min(rec.position, MAX_SHADES)
            s = min((rec.specialist or 0) + 1, MAX_SHADES)
            cls = f"tok draft p{p} s{s}"
        else:
            cls = f"tok target {rec.source}"
        if rec.special:
            cls += " special"
        parts.append(f'<span class="{cls}"{data} title="{title}">{_shown(text)}</span>')
    parts.append("</div>")
    return "".join(parts)


# On each lane's token view (gr.HTML's js_on_load: `element` is the component, `trigger` sends an event to the
# server): a click on a token, or Enter/Space on a focused one, sends its round as the view's click event, whose
# handler (view_handlers.round_pick_for) moves the lane's slider, tree and account there. One listener on the component
# serves every repaint of the tokens inside it; the flag keeps a second run of this code from adding another.
TOKEN_CLICK_JS = """
if (!element.dataset.possRoundPick) {
  element.dataset.possRoundPick = "1";
  const pick = (target) => {
    const tok = target && target.closest ? target.closest("[data-round]") : null;
    if (!tok || !element.contains(tok)) return false;
    trigger("click", {round: Number(tok.dataset.round)});
    return true;
  };
  element.addEventListener("click", (e) => { pick(e.target); });
  element.addEventListener("keydown", (e) => {
    if ((e.key === "Enter" || e.key === " ") && pick(e.target)) e.preventDefault();
  });
}
"""


def legend_html(color_by: str = "position", depth: int = 6, specialists: int = 3) -> str:
    """What the colours mean, for the current colouring mode."""
    if color_by == "specialist":
        chips = "".join(f'<span class="tok draft s{min(s, MAX_SHADES)}">S{s}</span>' for s in range(1, specialists + 1))
        what = "accepted draft token, by the specialist that drafted it"
        mode = "by-specialist"
    else:
        chips = "".join(f'<span class="tok draft p{min(p, MAX_SHADES)}">{p}</span>' for p in range(1, depth + 1))
        what = "accepted draft token, by draft position"
        mode = "by-position"
    return (
        f'<div class="poss-legend poss-tokens {mode}">'
        f'<span class="item">{chips} {what}</span>'
        f'<span class="item"><span class="tok target bonus">tok</span> the target\'s own token (bonus or '
        f"correction; every token of plain decoding)</span>"
        f'<span class="item"><s class="rej">tok</s> draft the target rejected there</span>'
        f'<span class="item muted">hover a token for round, position, specialist and probabilities; click '
        f"it (or Tab to it and press Enter) for its round's tree</span></div>"
    )


def badge_html(text: str, kind: str = "neutral", title: str = "", name: str = "") -> str:
    """A small pill: kind is "ok", "bad" or "neutral"; `title` is its tooltip; `name` (`data-badge`) says which badge
    it is, for readers that must not depend on its wording."""
    tip = f' title="{html.escape(title)}"' if title else ""
    which = f' data-badge="{name}"' if name else ""
    return f'<span class="poss-badge {kind}"{which}{tip}>{html.escape(text)}</span>'


def identity_badge(
    tokens: list[int],
    plain_tokens: list[int] | None,
    greedy: bool,
    finished: bool,
    divergence: Divergence | None = None,
) -> str:
    """At temperature 0 speculative decoding must reproduce plain decoding token for token: say whether it did, and
    where it did not, why (a rounding near-tie with plain's logit margin, or a real mismatch), the full reason in
    the tooltip."""
    if not greedy:
        return badge_html("sampling: same distribution as plain, not the same text", "neutral", name="identity")
    if plain_tokens is None:
        return badge_html("add the Plain lane to check identity", "neutral", name="identity")
    if divergence is not None:
        at = f"differs from plain decoding at token {divergence.index + 1}"
        margin = "" if divergence.margin is None else f"plain's logit margin {divergence.margin:.2g}"
        if divergence.kind == NEAR_TIE:
            why = f"{margin} ≤ {divergence.tolerance:g}" if margin else "margin not measured"
            return badge_html(f"≈ {at}: {divergence.tie} ({why})", "neutral", divergence.reason, "identity")
        return badge_html(
            f"✗ {at}: " + (f"{margin}, not a near-tie" if margin else "not expected here (margin not measured)"),
            "bad",
            divergence.reason,
            "identity",
        )
    n = min(len(tokens), len(plain_tokens))
    if finished and len(tokens) != len(plain_tokens):
        return badge_html(f"compared {n} tokens: identical so far", "ok", name="identity")
    return badge_html("✓ identical to plain decoding" + ("" if finished else " so far"), "ok", name="identity")


# A lane header's figures: key (its `data-stat`, what readers go by) and the label the page shows.
STAT_LABELS = {
    "tokens_per_s": "tokens/s",
    "tau": "τ",
    "rounds": "rounds",
    "tokens": "tokens",
    "budget": "budget",
    "depth_stop": "depth stop",
    "vs_plain": "vs plain",
}


def stat_line(items: list[tuple[str, str]]) -> str:
    """(key, value) pairs as "<b>value</b> label" spans, each carrying its key (STAT_LABELS) as `data-stat`."""
    spans = (f'<span data-stat="{k}"><b>{html.escape(v)}</b> {html.escape(STAT_LABELS[k])}</span>' for k, v in items)
    return '<div class="poss-stats">' + "".join(spans) + "</div>"


def status_html(message: str, kind: str = "info") -> str:
    """The status line above the lanes: kind is "info", "busy" or "error" (a message a user can act on)."""
    icon = {"error": "⚠ ", "busy": "⏳ ", "info": ""}.get(kind, "")
    return f'<div class="poss-status {kind}">{icon}{html.escape(neutral_paths(message), quote=False)}</div>'


# ---------------------------------------------------------------- lanes, charts, every output

LANE_PARTS = ("col", "head", "tokens", "text", "tree", "slider", "explain")


OUTPUT_NAMES = (
    ["status", "legend", "conversation"]
    + [f"lane{i}_{part}" for i in range(MAX_LANES) for part in LANE_PARTS]
    + ["pos_acc", "feature_deviation", "accept_hist", "tokens_per_s", "hardware"]
)


def outputs_dict(values: list) -> dict[str, Any]:
    """A handler's output list keyed by OUTPUT_NAMES (for tests and readers)."""
    return dict(zip(OUTPUT_NAMES, values))


def _fmt(value: float, spec: str = ".1f", none: str = "–") -> str:
    return none if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def lane_head_html(lane: Lane, comp: Comparison, running: bool) -> str:
    """The lane's title, live figures (tokens/s, τ, rounds, speed-up over plain) and its badges."""
    ev = lane.events
    tps = metrics.tokens_per_s(ev) if ev else math.nan
    plain = comp.lane(methods.PLAIN)
    items = [
        ("tokens_per_s", _fmt(tps)),
        ("tau", _fmt(metrics.tau(ev), ".2f")),
        ("rounds", str(len(metrics.draft_rounds(ev)))),
        ("tokens", str(metrics.total_new_tokens(ev))),
    ]
    if lane.budget is not None:
        items.append(("budget", f"{lane.budget} auto" if lane.budget_auto else str(lane.budget)))
    if lane.depth_stop:
        items.append(("depth_stop", f"p < {lane.depth_stop:g}"))
    if plain is not None and not lane.plain and plain.events and ev:
        items.append(("vs_plain", "×" + _fmt(metrics.speedup(tps, metrics.tokens_per_s(plain.events)), ".2f")))
    badges = []
    if not lane.plain:
        greedy = float(comp.spec.temperature) == 0.0
        badges.append(
            identity_badge(
                lane.token_ids,
                plain.token_ids if plain is not None else None,
                greedy,
                lane.finished and plain is not None and plain.finished,
                comp.divergence(lane) if greedy else None,
            )
        )
    if lane.error:
        state = f'<div class="poss-lane-error">⚠ {html.escape(neutral_paths(lane.error))}</div>'
    elif lane.finished:
        reason = lane.stop_reason or ""
        nice = {
            "eos": "finished (end of answer)",
            "max_new_tokens": "finished (max new tokens)",
            "context_limit": "stopped at the context limit",
            "cancelled": "stopped",
        }.get(reason, reason)
        state = f'<span class="poss-note" data-lane-state="{html.escape(reason)}">{html.escape(nice)}</span>'
    else:
        now = "running" if running else "paused"
        state = (
            f'<span class="poss-note" data-lane-state="{now}">'
            f"{'running…' if running else 'paused (Step for the next round)'}</span>"
        )
    if comp.replay:
        badges.append(badge_html("replay", name="replay"))
    if not lane.trained:
        badges.insert(
            0,
            badge_html(
                "untrained draft",
                "bad",
                "No trained checkpoint is bundled for this draft yet: it "
                "is a random draft, so almost nothing gets accepted.",
                "untrained",
            ),
        )
    return (
        f'<div class="poss-lane-head"><h3>{html.escape(lane.label)}</h3>{stat_line(items)}'
        f"<div>{''.join(badges)} {state}</div></div>"
    )


def lane_tree(lane: Lane, round_index: int | None) -> Any:
    if not lane.events:
        return figures.empty_figure("No round yet.", 360, f"{lane.short}: draft tree")
    r = len(lane.events) - 1 if round_index is None else max(0, min(int(round_index), len(lane.events) - 1))
    event = lane.events[r]
    root = lane.pieces[r - 1][-1] if r > 0 and lane.pieces[r - 1] else "root"
    return figures.tree_figure(
        event,
        labels=lane.node_texts[r],
        root_label=root or "root",
        bonus_label=lane.bonus_texts[r],
        title=f"{lane.short}: draft tree, round {r}",
        height=360,
    )


EXPLAIN_EMPTY = '<div class="poss-round-account poss-note">Pick a round with the slider to read it in words.</div>'


def account_html(text: str) -> str:
    """An `explain_round` account as HTML: the first line a paragraph, "- " lines a list; every text escaped."""
    lines = [line for line in text.splitlines() if line.strip()]
    head = [line for line in lines if not line.startswith("- ")]
    items = [line[2:] for line in lines if line.startswith("- ")]
    body = "".join(f"<p>{html.escape(line)}</p>" for line in head)
    if items:
        body += "<ul>" + "".join(f"<li>{html.escape(item)}</li>" for item in items) + "</ul>"
    return f'<div class="poss-round-account">{body}</div>'


def lane_explain(lane: Lane, round_index: int | None, sampling: bool = False) -> str:
    """The chosen round (the latest when None) of a lane told in words, under its tree."""
    if not lane.events:
        return EXPLAIN_EMPTY
    r = len(lane.events) - 1 if round_index is None else max(0, min(int(round_index), len(lane.events) - 1))
    event = lane.events[r]
    known: dict[int, str] = {}
    labels = lane.node_texts[r] if r < len(lane.node_texts) else []
    for node, label in zip(event.nodes, labels):
        known.setdefault(node.token, label)
    if r < len(lane.bonus_texts):
        known[event.bonus] = lane.bonus_texts[r]

    def token_text(token: int) -> str:
        if token in known:
            return known[token]
        return lane.token_text(token) if lane.token_text is not None else f"#{token}"

    return account_html(explain_round(event, token_text, sampling=sampling))


def round_slider(lane: Lane | None, value: int | None) -> Any:
    """A lane's round slider (0 = the prefill), at `value` (the latest round when None)."""
    n = len(lane.events) if lane is not None else 0
    top = max(1, n - 1)
    return gr.Slider(
        minimum=0, maximum=top, value=min(top, n - 1 if value is None else value) if n else 0, step=1, interactive=n > 1
    )


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
        parts.append(f"capped: the latest {state.POOL_ROUNDS:,} rounds per method, the oldest dropped")
    return "; ".join(parts)


def pooled_chart_runs(pools: Pools) -> tuple[dict[str, list], dict[str, str], str]:
    """The charts' runs for "All my runs": one pooled event stream per method (plain decoding first), their
    colours, and the note that says what was pooled."""
    order = sorted(pools, key=lambda m: m != methods.PLAIN)
    runs_ = {pools[m].label: pools[m].events() for m in order}
    colors = {pools[m].label: methods.color_of(m) or methods.OKABE_ITO[i % 7] for i, m in enumerate(order)}
    return runs_, colors, pool_note(pools)


def conversation_html(history: list[dict]) -> str:
    if not history:
        return (
            '<div class="poss-conversation poss-note">Single turn. After a run, tick Multi-turn to ask a '
            "follow-up: the next Run then continues the conversation.</div>"
        )
    turns = []
    for m in history:
        who = "you" if m.get("role") == "user" else "model"
        text = str(m.get("content", ""))
        turns.append(f"<b>{who}:</b> {html.escape(text[:300] + ('…' if len(text) > 300 else ''))}")
    return (
        '<div class="poss-conversation"><span class="poss-note">Conversation so far (continued when Multi-turn '
        "is ticked):</span><br>" + "<br>".join(turns) + "</div>"
    )


def draft_note(preset: Preset) -> str:
    """The preset's description, and which of its drafts are untrained stand-ins (the registry's `trained` flag)."""
    untrained = [m.short for m in methods.preset_methods(preset).values() if not m.trained]
    text = html.escape(preset.description)
    if untrained:
        text += (
            f"<br>⚠ No trained draft is bundled for {', '.join(untrained)}:"
            f" those lanes use <b>untrained</b> random drafts, so almost nothing gets accepted."
        )
    return f'<div class="poss-note">{text}</div>'


def render(
    session: Session,
    view: View,
    status: tuple[str, str] | None = None,
    running: bool = False,
    with_charts: bool = True,
    with_trees: bool = True,
) -> list:
    """Every output the lanes, charts and status show, in OUTPUT_NAMES order (`with_charts=False` leaves the four
    charts as they are, `with_trees=False` each lane's tree, round slider and account)."""
    if status is not None:
        session.status = status
    comp = session.comparison
    out: dict[str, Any] = {"status": status_html(*session.status)}
    depth = int(comp.spec.depth) if comp is not None else 6
    n_spec = 1
    if comp is not None:
        n_spec = max([1] + [n.specialist + 1 for lane in comp.lanes for e in lane.events[-3:] for n in e.nodes])
    out["legend"] = legend_html(view.color_by, depth, max(n_spec, 3))
    out["conversation"] = conversation_html(session.history)
    lanes_ = comp.lanes if comp is not None else []
    for i in range(MAX_LANES):
        p = f"lane{i}_"
        if i < len(lanes_):
            lane = lanes_[i]
            out[p + "col"] = gr.Column(visible=True)
            out[p + "head"] = lane_head_html(lane, comp, running)
            out[p + "tokens"] = (
                '<div class="poss-lane-tokens">'
                + tokens_html(
                    lane.records, view.color_by, view.show_rejected, placeholder="waiting for the first round…"
                )
                + "</div>"
            )
            out[p + "text"] = lane.text
            pin = session.pins.get(i)
            if with_trees:
                out[p + "tree"] = lane_tree(lane, pin)
                out[p + "slider"] = round_slider(lane, pin)
                out[p + "explain"] = lane_explain(lane, pin, float(comp.spec.temperature) > 0.0)
            else:
                out[p + "tree"] = out[p + "slider"] = out[p + "explain"] = gr.skip()
        else:
            visible = comp is None and i < len(DEFAULT_METHODS)
            out[p + "col"] = gr.Column(visible=visible)
            out[p + "head"] = ""
            out[p + "tokens"] = (
                '<div class="poss-lane-tokens">'
                + tokens_html([], placeholder="Press Run to stream this lane.")
                + "</div>"
            )
            out[p + "text"] = ""
            out[p + "tree"] = figures.empty_figure("The latest round's draft tree appears here.", 360, "Draft tree")
            out[p + "slider"] = round_slider(None, None)
            out[p + "explain"] = EXPLAIN_EMPTY
    if not with_charts:
        for name in ("pos_acc", "feature_deviation", "accept_hist", "tokens_per_s"):
            out[name] = gr.skip()
        out["hardware"] = gr.skip()
        return [out[name] for name in OUTPUT_NAMES]
    out.update(zip(CHART_NAMES, chart_outputs(session, view)))
    info = comp.hardware if comp is not None and comp.hardware else loaded_hardware()
    note = "Showing a saved run: the hardware it was recorded on." if comp is not None and comp.replay else ""
    out["hardware"] = about.hardware_markdown(info, note)
    return [out[name] for name in OUTPUT_NAMES]


CHART_NAMES = ("pos_acc", "feature_deviation", "accept_hist", "tokens_per_s")


def chart_outputs(session: Session, view: View) -> list:
    """The four charts (CHART_NAMES order) of what the view's source asks for: this run, all my runs, or everyone
    on this server."""
    comp = session.comparison
    if view.everyone:
        return class_charts(session, view)
    runs_, colors, note = pooled_chart_runs(session.pool_view(comp)) if view.pooled else (*chart_runs(comp), "")
    return [
        figures.pos_acc_figure(runs_, conditional=view.conditional, colors=colors, note=note),
        figures.feature_deviation_figure(runs_, colors=colors, note=note),
        figures.accept_hist_figure(runs_, colors=colors, note=note),
        figures.tokens_per_s_figure(runs_, colors=colors, note=note),
    ]


def class_preset(session: Session) -> str:
    """The preset the class charts show: the live run's on show, else (no lanes, a replay or a loaded run, which
    may come from another machine's preset) the one the app serves first."""
    comp = session.comparison
    return comp.spec.preset if comp is not None and not comp.replay else (state.APP_PRESET or DEFAULT_PRESET)


def class_note(preset: str, entries: dict[str, ClassEntry]) -> str:
    """The class charts' second subtitle line: whose runs, how many per method, since when."""
    since = time.strftime("%H:%M UTC", time.gmtime(CLASS.since))
    if not entries:
        return f"Everyone on this server ({preset}): no finished live run yet (since {since})"
    runs = ", ".join(f"{e.label} {e.runs}" for e in entries.values())
    return f"Everyone on this server ({preset}), live runs pooled since {since}: {runs}"


def class_charts(session: Session, view: View) -> list:
    """ "Everyone on this server": each method's pooled AcceptanceStats on the preset (numbers only) drawn by the
    same chart code, n= on each chart; tokens/s as pooled totals (the pool keeps no per-round timeline)."""
    preset = class_preset(session)
    entries = CLASS.view(preset)
    order = sorted(entries, key=lambda m: m != methods.PLAIN)
    entries = {m: entries[m] for m in order}
    runs_ = {e.label: e.stats for e in entries.values()}
    colors = {e.label: methods.color_of(m) or methods.OKABE_ITO[i % 7] for i, (m, e) in enumerate(entries.items())}
    note = class_note(preset, entries)
    session.class_seen = (CLASS.version, view.conditional)
    speeds = " · ".join(
        f"{e.label} {e.tokens_per_s:.1f} ({e.tokens:,} tokens, {e.runs} runs)"
        for e in entries.values()
        if e.seconds > 0
    )
    tps = figures.empty_figure(
        f"Pooled tokens/s: {speeds}" if speeds else "No finished live run yet.",
        340,
        "Tokens/s, everyone on this server (tokens over the lanes' own compute time)",
    )
    return [
        figures.pos_acc_figure(runs_, conditional=view.conditional, colors=colors, note=note),
        figures.feature_deviation_figure(runs_, colors=colors, note=note),
        figures.accept_hist_figure(runs_, colors=colors, note=note),
        tps,
    ]


def loaded_hardware() -> dict[str, str] | None:
    loaded = MODELS.loaded_targets()
    return hardware_info(loaded[-1]) if loaded else None


def skip_all(session: Session, status: tuple[str, str]) -> list:
    """Change only the status line."""
    session.status = status
    return [status_html(*status)] + [gr.skip()] * (len(OUTPUT_NAMES) - 1)
