"""One round in words: a short plain-language account of a `RoundEvent` for a class (what was drafted, what the
target kept and why the first rejected draft lost, the bonus token, the time split). Pure: token texts come from the
caller, so the engine needs no tokenizer here."""

from __future__ import annotations

import math
from collections.abc import Callable

from .events import RoundEvent


def _q(text: str) -> str:
    """A token's text in quotes, with whitespace made visible."""
    return '"' + text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t") + '"'


def say_probability(value: float) -> str:
    """A probability as a student reads it: two decimals, or below 0.01 "about 1 in 7,700" (never "1.3e-04")."""
    if value >= 0.01 or value <= 0:
        return f"{value:.2f}"
    return f"about 1 in {round(1 / value):,}"


def _p(value: float | None) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return say_probability(value)


def _positions(depths: list[int]) -> str:
    """[1, 2, 3] -> "positions 1–3"; [1, 3] -> "positions 1, 3"; [2] -> "position 2"."""
    ds = sorted(set(depths))
    if len(ds) == 1:
        return f"position {ds[0]}"
    if ds == list(range(ds[0], ds[-1] + 1)):
        return f"positions {ds[0]}–{ds[-1]}"
    return "positions " + ", ".join(str(d) for d in ds)


def _time_split(event: RoundEvent) -> str:
    parts = [f"draft {event.draft_ms:.1f} ms", f"verify {event.verify_ms:.1f} ms"]
    if event.wall_ms > 0:
        parts.append(f"the rest (engine bookkeeping) {event.overhead_ms:.1f} ms, of {event.wall_ms:.1f} ms in all")
    return "Time: " + ", ".join(parts) + "."


def explain_round(
    event: RoundEvent,
    token_text: Callable[[int], str],
    specialist_label: Callable[[int], str] | None = None,
    sampling: bool = False,
) -> str:
    """A few lines (one sentence each, "- " bullets after the first) telling what round `event` did.

    `token_text(id)` is a token's own text; `specialist_label(k)` names specialist k (default "S{k+1}");
    `sampling` says the round was verified by accept/reject draws (temperature > 0) rather than greedily."""
    bonus = _q(token_text(event.bonus))
    bonus_p = _p(event.bonus_prob)
    if not event.draft_observed:
        return _unobserved_round(event, token_text, bonus, sampling)
    if event.prefill:
        return _prefill_round(event, bonus, bonus_p)
    if not event.nodes:
        return _plain_round(event, bonus, bonus_p, sampling)
    lines = [
        *_drafted_and_checked(event, specialist_label or (lambda k: f"S{k + 1}"), sampling),
        _kept(event, token_text),
    ]
    if event.past_end:
        lines.append(_ended_inside(event))
    else:
        lines.append(_first_rejected(event, token_text, bonus, bonus_p, sampling))
        lines.append(
            f"- Bonus: the target added its own token {bonus}"
            + (f" (p {bonus_p})" if bonus_p else "")
            + f", so this round emitted {len(event.accepted) + 1} token{'s' if event.accepted else ''}"
            f" for one target pass."
        )
    lines.append(f"- {_time_split(event)}")
    return "\n".join(lines)


def _prefill_round(event: RoundEvent, bonus: str, bonus_p: str | None) -> str:
    """The prefill: the prompt read in one pass and the first token picked; nothing drafted."""
    return "\n".join(
        [
            f"Round {event.round} (prefill): the target read the whole prompt in one forward pass and picked the "
            f"first token {bonus}" + (f" (its probability {bonus_p})" if bonus_p else "") + ". Nothing was drafted.",
            f"- Time: {event.verify_ms:.1f} ms.",
        ]
    )


def _plain_round(event: RoundEvent, bonus: str, bonus_p: str | None, sampling: bool) -> str:
    """A round of plain decoding: one target pass, one token."""
    return "\n".join(
        [
            f"Round {event.round} (plain decoding): nothing was drafted; the target ran one forward pass and "
            + ("drew" if sampling else "picked")
            + f" one token, {bonus}"
            + (f" (its probability {bonus_p})" if bonus_p else "")
            + ".",
            f"- {_time_split(event)}",
        ]
    )


def _drafted_and_checked(event: RoundEvent, label: Callable[[int], str], sampling: bool) -> list[str]:
    """What the draft proposed, where and by which specialist; then how the target checked it."""
    nodes = event.nodes
    by_spec: dict[int, list[int]] = {}
    for n in nodes:
        by_spec.setdefault(n.specialist, []).append(n.depth)
    who = "; ".join(
        f"specialist {label(s)} drafted {len(ds)} at {_positions(ds)}"
        for s, ds in sorted(by_spec.items(), key=lambda kv: min(kv[1]))
    )
    return [
        f"Round {event.round}: the draft proposed {len(nodes)} candidate tokens at "
        f"{_positions([n.depth for n in nodes])} ({who}).",
        f"- The target checked all {len(nodes)} in one forward pass ({event.verify_ms:.1f} ms), "
        + (
            "drawing accept or reject for each candidate down the tree."
            if sampling
            else "keeping a drafted token only where it is the target's own top choice."
        ),
    ]


def _target_p(event: RoundEvent, i: int) -> str | None:
    """Node `i`'s target probability as said, where the round has it."""
    return _p(event.target_probs[i]) if i < len(event.target_probs) else None


def _kept(event: RoundEvent, token_text: Callable[[int], str]) -> str:
    """The drafted tokens the target kept, in order, each with its target probability."""
    if not event.accepted:
        return "- It kept none of the drafted tokens."
    kept = ", ".join(
        _q(token_text(event.nodes[a].token)) + (f" (target p {_target_p(event, a)})" if _target_p(event, a) else "")
        for a in event.accepted
    )
    return f"- It kept {len(event.accepted)} drafted token{'s' if len(event.accepted) > 1 else ''}, in order: {kept}."


def _first_rejected(
    event: RoundEvent, token_text: Callable[[int], str], bonus: str, bonus_p: str | None, sampling: bool
) -> str:
    """Why the first position after the kept tokens was rejected: the draft's top candidate there lost to the
    target's choice (greedy) or an accept/reject draw (sampling); or nothing was drafted there."""
    nodes = event.nodes
    at = len(event.accepted) + 1
    parent = event.accepted[-1] if event.accepted else -1
    kids = sorted((i for i, n in enumerate(nodes) if n.parent == parent), key=lambda i: -nodes[i].score)
    if not kids:
        return f"- Nothing was drafted at position {at} after the kept tokens, so nothing there was rejected."
    top = kids[0]
    cand = _q(token_text(nodes[top].token))
    cand_tp = _target_p(event, top)
    others = f" (and {len(kids) - 1} other candidate{'s' if len(kids) > 2 else ''} there)" if len(kids) > 1 else ""
    lost = (
        f"- Position {at} was the first rejected: the draft's top candidate {cand} (draft p "
        f"{_p(nodes[top].draft_prob)}){others}"
    )
    if not sampling:
        choice = f"the target's choice {bonus}" + (f" (target p {bonus_p})" if bonus_p else "")
        return f"{lost} lost to {choice}" + (f"; the target gave {cand} only {cand_tp}" if cand_tp else "") + "."
    return (
        f"{lost} lost an accept/reject draw. The rule accepts a candidate with "
        f"probability min(1, p_target/p_draft); this draft proposes its candidates outright (p_draft = 1 in "
        f"the rule, its probability only ranks them), so {cand} was accepted with probability p_target"
        + (f" = {cand_tp}" if cand_tp else "")
        + " and the draw said no. Rejected candidates are taken out "
        f"of the target's distribution and the target drew its own token {bonus}"
        + (f" (target p {bonus_p})" if bonus_p else "")
        + " from what remained."
    )


def _ended_inside(event: RoundEvent) -> str:
    """The account's line for a round the answer's end cut: what it emitted, and what it verified but dropped."""
    dropped = event.past_end - 1  # accepted draft tokens past the end; the target's own token is the last one dropped
    past = f"{dropped} more drafted token{'s' if dropped != 1 else ''} the target accepted and " if dropped else ""
    return (
        f"- The answer ended inside this round: {past}the target's own next token fall past its end and are "
        f"left out of the answer and of every count, so this round emitted {event.emitted} "
        f"token{'s' if event.emitted != 1 else ''} for one target pass."
    )


def _unobserved_round(event: RoundEvent, token_text: Callable[[int], str], bonus: str, sampling: bool) -> str:
    """A round of transformers' generate (prompt lookup, assisted): only what the target kept is known, so the
    account says what was kept and what cannot be seen, and claims nothing about rejected candidates."""
    kept = [_q(token_text(event.nodes[a].token)) for a in event.accepted]
    where = "read the whole prompt and " if event.prefill else ""
    lines = [
        f"Round {event.round}{' (prefill)' if event.prefill else ''}: transformers' generate proposed candidate "
        f"tokens and the target {where}checked them in one forward pass."
    ]
    if kept:
        lines.append(
            f"- It kept {len(kept)} candidate token{'s' if len(kept) > 1 else ''}, in order: {', '.join(kept)}."
        )
    else:
        lines.append(
            "- It kept no candidate: either none matched the target's choice or none was proposed (prompt "
            "lookup proposes nothing when the latest words do not occur earlier)."
        )
    if event.past_end:
        lines.append(_ended_inside(event))
    else:
        lines.append(
            f"- The target {'drew' if sampling else 'picked'} its own token {bonus}, so this round emitted "
            f"{len(kept) + 1} token{'s' if kept else ''} for one target pass."
        )
    lines.append(
        "- Not observable through generate's streamer: how many candidates were proposed, which were "
        "rejected, and their probabilities."
    )
    split = (
        f"of which {event.draft_ms:.1f} ms in the assistant model's forward passes"
        if event.draft_ms > 0
        else "drafting and verifying are not timed apart"
    )
    lines.append(f"- Time: {event.wall_ms:.1f} ms for the round ({split}).")
    return "\n".join(lines)
