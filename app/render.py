"""Token view: each emitted token as an HTML-escaped span coloured by how it came, with tooltips, legend and badges."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

from poss_core.decoding.events import RoundEvent

MAX_SHADES = 8  # draft positions and specialists beyond this reuse the last shade


@dataclass
class Rejected:
    """A drafted candidate the target turned down, at the position where the round's accepted path ended."""

    text: str
    draft_prob: float
    target_prob: float


@dataclass
class TokenRecord:
    """One emitted token and where it came from."""

    text: str
    round: int
    source: str  # "draft" (accepted draft token) | "bonus" | "corrected" | "prefill" | "plain"
    position: int = 0  # draft position 1..depth for accepted draft tokens; the position it filled for target tokens
    specialist: int | None = None
    draft_prob: float | None = None
    target_prob: float | None = None
    special: bool = False  # EOS and other special tokens: shown as a marker, not as text
    rejected: list[Rejected] = field(default_factory=list)

    @property
    def from_draft(self) -> bool:
        return self.source == "draft"


class Detokenizer:
    """Text of each new token in context (sentencepiece spaces, multi-byte characters split over tokens).

    The usual streaming rule: decode a short window before and after the token and emit the difference, holding
    text back while it ends in an incomplete character."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])

    def push(self, token: int) -> str:
        if token in self.special_ids:
            return ""
        self.ids.append(token)
        prefix = self.tokenizer.decode(self.ids[self.prefix_offset:self.read_offset], skip_special_tokens=True)
        text = self.tokenizer.decode(self.ids[self.prefix_offset:], skip_special_tokens=True)
        if len(text) > len(prefix) and not text.endswith("\ufffd"):
            piece = text[len(prefix):] if text.startswith(prefix) else text
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return piece
        return ""


class TokenTexts:
    """Stand-alone text of a token id (tree labels), cached."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, token: int) -> str:
        if token not in self.cache:
            self.cache[token] = self.tokenizer.decode([token], skip_special_tokens=False)
        return self.cache[token]


def rejected_at_end(event: RoundEvent, labels: list[str]) -> list[Rejected]:
    """The drafted children of the last accepted node (or the root) that the target rejected, best draft score first."""
    parent = event.accepted[-1] if event.accepted else -1
    kids = [i for i, n in enumerate(event.nodes) if n.parent == parent]
    kids.sort(key=lambda i: -event.nodes[i].score)
    return [Rejected(labels[i] if i < len(labels) else str(event.nodes[i].token), event.nodes[i].draft_prob,
                     event.target_probs[i] if i < len(event.target_probs) else math.nan) for i in kids]


def round_records(event: RoundEvent, pieces: list[str], labels: list[str],
                  special_ids: set[int] | frozenset[int] = frozenset()) -> list[TokenRecord]:
    """The records of a round's emitted tokens: accepted draft tokens first, then the target's token.

    `pieces` is each emitted token's text in context, `labels` each drafted node's own text (for rejected tokens)."""
    out = []
    k = event.accept_len
    for i, tok in enumerate(event.tokens):
        text = pieces[i] if i < len(pieces) else ""
        special = tok in special_ids
        if i < k:
            a = event.accepted[i]
            node = event.nodes[a]
            out.append(TokenRecord(text, event.round, "draft", i + 1, node.specialist, node.draft_prob,
                                   event.target_probs[a] if a < len(event.target_probs) else None, special))
        elif event.prefill:
            out.append(TokenRecord(text, event.round, "prefill", special=special))
        elif not event.nodes:
            out.append(TokenRecord(text, event.round, "plain", special=special))
        else:
            rejected = rejected_at_end(event, labels)
            out.append(TokenRecord(text, event.round, "corrected" if rejected else "bonus", k + 1, special=special,
                                   rejected=rejected))
    return out


def _p(value: float | None) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def tooltip(rec: TokenRecord) -> str:
    head = f"round {rec.round}"
    if rec.from_draft:
        return (f"{head} · accepted draft token\ndraft position {rec.position} · specialist S{(rec.specialist or 0) + 1}"
                f"\ndraft p {_p(rec.draft_prob)} · target p {_p(rec.target_prob)}")
    what = {"prefill": "the target's first token (prefill: nothing drafted)",
            "plain": "the target's token (plain decoding)",
            "bonus": f"the target's bonus token after {rec.position - 1} accepted",
            "corrected": f"the target's token at position {rec.position}: it corrected the draft"}[rec.source]
    lines = [f"{head} · {what}"]
    if rec.rejected:
        lines.append("rejected drafts here: " + "; ".join(
            f"{r.text!r} (draft p {_p(r.draft_prob)}, target p {_p(r.target_prob)})" for r in rec.rejected[:5]))
    return "\n".join(lines)


def _shown(text: str) -> str:
    """Escaped token text; a newline also shows a visible mark so whitespace tokens stay visible."""
    escaped = html.escape(text, quote=False)
    return escaped.replace("\n", '<span class="nl">↵</span>\n')


def tokens_html(records: list[TokenRecord], color_by: str = "position", show_rejected: bool = False,
                placeholder: str = "") -> str:
    """The coloured token view. `color_by` is "position" (shade by draft position) or "specialist"."""
    mode = "by-specialist" if color_by == "specialist" else "by-position"
    parts = [f'<div class="poss-tokens {mode}{"" if show_rejected else " hide-rej"}">']
    if not records and placeholder:
        parts.append(f'<span class="poss-placeholder">{html.escape(placeholder)}</span>')
    for rec in records:
        title = html.escape(tooltip(rec), quote=True)
        if rec.rejected:
            best = rec.rejected[0]
            parts.append(f'<s class="rej" title="{title}">{_shown(best.text)}</s>')
        text = rec.text or ("⟨special⟩" if rec.special else "")
        if rec.from_draft:
            p = min(rec.position, MAX_SHADES)
            s = min((rec.specialist or 0) + 1, MAX_SHADES)
            cls = f"tok draft p{p} s{s}"
        else:
            cls = f"tok target {rec.source}"
        if rec.special:
            cls += " special"
        parts.append(f'<span class="{cls}" title="{title}">{_shown(text)}</span>')
    parts.append("</div>")
    return "".join(parts)


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
    return (f'<div class="poss-legend poss-tokens {mode}">'
            f'<span class="item">{chips} {what}</span>'
            f'<span class="item"><span class="tok target bonus">tok</span> the target\'s own token (bonus or '
            f'correction; every token of plain decoding)</span>'
            f'<span class="item"><s class="rej">tok</s> draft the target rejected there</span>'
            f'<span class="item muted">hover a token for round, position, specialist and probabilities</span></div>')


def badge_html(text: str, kind: str = "neutral") -> str:
    """A small pill: kind is "ok", "bad" or "neutral"."""
    return f'<span class="poss-badge {kind}">{html.escape(text)}</span>'


LOW_PRECISION = ("bfloat16", "float16")


def identity_badge(tokens: list[int], plain_tokens: list[int] | None, greedy: bool, finished: bool,
                   dtype: str = "") -> str:
    """At temperature 0 speculative decoding must reproduce plain decoding token for token: say whether it did.
    In bf16/fp16 a batched verify pass and a one-token plain step round differently, so a near-tie can flip."""
    if not greedy:
        return badge_html("sampling: same distribution as plain, not the same text", "neutral")
    if plain_tokens is None:
        return badge_html("add the Plain lane to check identity", "neutral")
    n = min(len(tokens), len(plain_tokens))
    for i in range(n):
        if tokens[i] != plain_tokens[i]:
            if dtype in LOW_PRECISION:
                return badge_html(f"≈ differs from plain decoding at token {i + 1}: in {dtype} a near-tie can round "
                                  f"either way in a batched verify pass (float32 gives exact identity)", "neutral")
            return badge_html(f"✗ differs from plain decoding at token {i + 1}", "bad")
    if finished and len(tokens) != len(plain_tokens):
        return badge_html(f"compared {n} tokens: identical so far", "ok")
    return badge_html("✓ identical to plain decoding" + ("" if finished else " so far"), "ok")


def stat_line(items: list[tuple[str, str]]) -> str:
    return '<div class="poss-stats">' + "".join(
        f'<span><b>{html.escape(v)}</b> {html.escape(k)}</span>' for k, v in items) + "</div>"


def status_html(message: str, kind: str = "info") -> str:
    """The status line above the lanes: kind is "info", "busy" or "error" (a message a user can act on)."""
    icon = {"error": "⚠ ", "busy": "⏳ ", "info": ""}.get(kind, "")
    return f'<div class="poss-status {kind}">{icon}{html.escape(message, quote=False)}</div>'
