"""Token HTML: each emitted token as an escaped span coloured by how it came (its tooltip says why), the legend,
the badges, a header's figures and the status line."""

from __future__ import annotations

import html
import math

from app.server.server_text import neutral_paths
from poss_core.models.numerics import NEAR_TIE, Divergence
from poss_core.rounds.explain import say_probability
from poss_core.rounds.token_records import TokenRecord

MAX_SHADES = 8  # draft positions and specialists beyond this reuse the last shade


def _p(value: float | None) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else say_probability(value)


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


END_MARK = "∎ end"  # an end-of-turn token (EOS, <|im_end|>), drawn as a mark rather than its raw text


def _ends_turn(name: str) -> bool:
    """Whether a special token's name reads as an end of the answer (<|im_end|>, <|endoftext|>, </s>, <|eot_id|>)."""
    low = (name or "").lower()
    return any(k in low for k in ("end", "eos", "eot", "</s>"))


def special_mark(name: str) -> str:
    """What a special token is drawn as: the end mark for the end of an answer, a diamond for any other."""
    return END_MARK if _ends_turn(name) else "◆"


def tokens_html(
    records: list[TokenRecord],
    color_by: str = "position",
    show_rejected: bool = False,
    placeholder: str = "",
    open_end: bool = False,
) -> str:
    """The coloured token view. `color_by` is "position" (shade by draft position) or "specialist"; `open_end`
    leaves its last tag for the browser to close, so that the view of more tokens starts with the view of fewer.

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
        text = rec.text
        if rec.special:  # drawn as a mark; its name only in the tooltip
            text = special_mark(rec.text)
            what = "end of the answer" if _ends_turn(rec.text) else "special token"
            title = html.escape(f"{tooltip(rec)}\nthe model's {what}: {rec.text or '(unnamed)'}", quote=True)
        if rec.from_draft:
            p = min(rec.position, MAX_SHADES)
            s = min((rec.specialist or 0) + 1, MAX_SHADES)
            cls = f"tok draft p{p} s{s}"
        else:
            cls = f"tok target {rec.source}"
        if rec.special:
            cls += " special"
        parts.append(f'<span class="{cls}"{data} title="{title}">{_shown(text)}</span>')
    if not open_end:
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
        f'<span class="item"><span class="tok target special">{END_MARK}</span> the end of the answer</span>'
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
    """At temperature 0 speculative decoding must reproduce plain decoding token for token: say whether it did in
    words a student reads, and where it did not, from which token and why in short (a rounding near-tie, or a real
    difference), the technical detail (plain's logit margin, the precision's tolerance, the reason) on hover."""
    if not greedy:
        return badge_html(
            "sampling: same odds as plain decoding, not the same text",
            "neutral",
            "With temperature above 0 each lane draws its own sample: verification keeps plain decoding's "
            "distribution exactly, so the texts differ while the odds of every text are the same.",
            name="identity",
        )
    if plain_tokens is None:
        return badge_html("add the Plain lane to check identity", "neutral", name="identity")
    if divergence is not None:
        at = f"differs from token {divergence.index + 1}"
        detail = divergence_detail(divergence)
        if divergence.kind == NEAR_TIE:
            return badge_html(
                f"≈ {at}: {divergence.tie}, the two best tokens almost equal", "neutral", detail, "identity"
            )
        return badge_html(f"✗ {at}: a real difference, not a rounding tie", "bad", detail, "identity")
    if finished and len(tokens) != len(plain_tokens):
        n = min(len(tokens), len(plain_tokens))
        return badge_html(f"✓ identical to plain decoding for all {n} tokens both wrote", "ok", name="identity")
    if finished:
        return badge_html("✓ identical to plain decoding, token for token", "ok", name="identity")
    return badge_html("✓ identical to plain decoding so far", "ok", name="identity")


def divergence_detail(divergence: Divergence) -> str:
    """The identity badge's tooltip: where the lane parted from plain decoding, plain's logit margin against the
    precision's tolerance, and the reason the engine gives."""
    if divergence.margin is None:
        margin = "plain's logit margin there was not measured"
    else:
        margin = f"plain's logit margin there: {divergence.margin:.2g} (tolerance {divergence.tolerance:g})"
    return f"First different token: {divergence.index + 1}. {margin}. {divergence.reason}"


# A lane header's figures: key (its `data-stat`, what readers go by) and the label the page shows.
STAT_LABELS = {
    "tokens_per_s": "tokens/s",
    "tau": "τ",
    "rounds": "rounds",
    "tokens": "tokens",
    "budget": "budget",
    "depth_stop": "depth stop (a round drafts no deeper once its best path's probability falls below it)",
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
