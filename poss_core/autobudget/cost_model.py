"""The cost model of `--tree-budget auto`: expected tokens per second of a tree budget (and depth, and dynamic depth
stop) for a draft, from a measured forward-time curve and an acceptance profile; pure functions, no model.

Expected tokens/s at budget B = τ(B) / (draft_ms + forward_ms(B) + head(B) + fixed_ms) where
- forward_ms(B) is the measured curve: the verify forward over B tokens up to the hidden states, at a 256-token
  context; head_ms(r) is measured with it: the LM head over r of those rows (to float32 on the CPU). The per-row
  work after the head (argmax at the slots acceptance visits, the parents' log-normalisers) does not depend on which
  rows went through it, and is part of fixed_ms. Both are medians, made non-decreasing (noise can only make a
  bigger tree look cheaper, never the other way round);
- head(B) is the LM head's cost the cheaper of two ways (`head_ms`, `DecodeConfig.head_rows`): "read" puts the
  slots with children through it in one call and the slot where acceptance stops, when it is a leaf, in a second
  one-row call (`verify.SlotRows`), costed head_ms(children) + head_ms(1) in the rounds that stop at a leaf;
  "all" puts every slot through it in one call, head_ms(B). On a CPU the head's cost is mostly reading its weights
  (57 MB in bf16 for a 49k vocabulary), so for small trees "all" can be the cheaper. The reads come from the
  calibration rounds like τ(B) below (every slot, an upper bound, for the default profile);
- draft_ms(d) and fixed_ms come from a short calibration decode: drafting does not depend on B (EAGLE-2 drafts the
  same top_k frontier per depth whatever the budget, and only the final pruning keeps fewer nodes), and what a
  shallower tree would cost is read off timing marks inside each round's tree build (depth 1 carries the context rows
  the draft reads and the fixed Python work, so drafting is not proportional to depth); fixed_ms is the round's
  measured overhead (acceptance, cache commit, events);
- τ(B) comes from the draft's acceptance profile. The calibration decode runs at the largest budget considered; since
  EAGLE-2 keeps the best (B − 1) candidates by cumulative score and greedy acceptance walks the target's argmax, the
  accept length a round would have had with a smaller budget is exactly the number of leading nodes of its accepted
  path whose score rank is below B − 1. So τ(B) for every B ≤ the calibration budget is read off the same rounds
  (`profile="calibrate"`, the default and what the benchmark uses; exact for greedy decoding, an estimate for
  sampling).
  Without calibration prompts, or with `profile="default"`, τ(B) = 1 + Σ_k Π_{i≤k} α_i·c(B): α is the published
  EAGLE-2 conditional pos-acc (reference §6; 65% after position 4) and c(B) = 1 − 0.4^((B−1)/depth) is a heuristic
  coverage (the chance that the target's token is among the ~(B − 1)/depth nodes a tree keeps per depth if each
  further candidate catches 60% of what is left). It describes a trained draft, not an untrained one.
- A dynamic depth stop p (`DecodeConfig.depth_stop`: drafting ends after the first depth whose best path has draft
  probability below p) is costed on the same rounds: each is charged the depth it would have drafted (its best
  cumulative score per depth is recorded in its nodes), the slots and rows of that shallower tree, and its accept
  length there. Expected tokens/s is then the rounds' new tokens over their summed milliseconds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from ..decoding.tree import stop_threshold
from ..rounds import metrics
from ..rounds.events import RoundEvent

CANDIDATE_BUDGETS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 60, 64, 80, 96, 128)
MAX_BUDGET = 96
# Dynamic depth stops `auto` considers (0: every round drafts the full depth; see DecodeConfig.depth_stop).
DEPTH_STOPS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3)
DEFAULT_POS_ACC = (0.920, 0.784, 0.717, 0.671)  # EAGLE-2, reference §6; later positions use DEFAULT_TAIL
DEFAULT_TAIL = 0.65
DEFAULT_MISS = 0.4  # coverage heuristic: each further kept candidate catches 60% of what is left


class Curve(Protocol):
    """What the cost model reads of a measured forward-time curve (`timing.ForwardCurve` measures one)."""

    def at(self, n: float) -> float:
        """The target's forward milliseconds over n verified tokens."""

    def post_at(self, n: float) -> float:
        """The LM head's milliseconds over n rows."""


# ----- acceptance profiles ---------------------------------------------------------------------------------------
def accepted_ranks(event: RoundEvent, max_depth: int | None = None) -> list[int]:
    """Score rank (0 = best) of each node on the round's accepted path among its drafted nodes, ranked the way
    EAGLE-2 pruning ranks candidates (cumulative score, ties to the shallower node).

    With `max_depth`, the ranks a tree drafted only that deep would give: EAGLE-2 drafts depth by depth, so the nodes
    up to that depth are the same, and the deeper ones simply do not compete for the budget."""
    if not event.accepted:
        return []
    rank = {node: r for r, node in enumerate(_pruning_order(event, max_depth))}
    return [rank[a] for a in event.accepted if a in rank]


def _pruning_order(event: RoundEvent, max_depth: int | None) -> list[int]:
    """The round's drafted nodes (up to `max_depth`) best first, the way EAGLE-2 pruning ranks candidates."""
    keep = [i for i, n in enumerate(event.nodes) if max_depth is None or n.depth <= max_depth]
    keys = {i: event.nodes[i].score - 1e-9 * event.nodes[i].depth for i in keep}
    return sorted(keep, key=lambda i: (-keys[i], i))


def head_reads_by_budget(event: RoundEvent, max_budget: int, max_depth: int | None = None) -> list[tuple[int, int]]:
    """Entry b (2 ≤ b ≤ max_budget), had the round's tree kept only its best b − 1 nodes: (slots with children,
    1 if acceptance stops at a leaf else 0). With `head_rows="read"` verification puts the first through the LM head
    in one call and the leaf's row in a second one-row call; with "all", every slot in one call."""
    order = _pruning_order(event, max_depth)
    ranks = accepted_ranks(event, max_depth)
    reads = [(0, 1)] * (max_budget + 1)  # a lone root: its own row, read when acceptance stops there
    with_children: set[int] = set()  # parent node index, -1 for the root
    for b in range(2, max_budget + 1):
        if b - 2 < len(order):
            with_children.add(event.nodes[order[b - 2]].parent)
        n_acc = accept_len_at_budget(ranks, b)
        stop = event.accepted[n_acc - 1] if n_acc else -1
        reads[b] = (len(with_children), 0 if stop in with_children else 1)
    return reads


def head_ms(curve: Curve, reads: Sequence[tuple[int, int]], slots: Sequence[int]) -> tuple[float, str]:
    """Mean LM-head milliseconds per round over calibration rounds, (children, leaf) reads and slots per round, the
    cheaper of verification's two ways and its name: "read" (one call over the slots with children, a second
    one-row call when acceptance stops at a leaf) or "all" (every slot in one call; on a CPU the head's cost is
    mostly reading its weights, so for small trees this can be the cheaper)."""
    if not reads:
        return 0.0, "read"
    read = sum((curve.post_at(c) if c else 0.0) + leaf * curve.post_at(1) for c, leaf in reads) / len(reads)
    every = sum(curve.post_at(s) for s in slots) / len(slots)
    return (every, "all") if every < read else (read, "read")


def accept_len_at_budget(ranks: Sequence[int], budget: int) -> int:
    """How many leading accepted nodes a tree of `budget` slots (root included) would still hold."""
    n = 0
    for r in ranks:
        if r >= budget - 1:
            break
        n += 1
    return n


@dataclass
class AcceptanceProfile:
    """τ as a function of the tree budget (and depth): from calibration rounds (ranks) or the default heuristic."""

    source: str
    max_budget: int
    depth: int
    ranks: list[list[int]] | None = None  # per calibration round, at the full depth
    pos_acc: list[float] | None = None  # default profile: conditional pos-acc for a big tree
    ranks_by_depth: dict[int, list[list[int]]] = field(default_factory=dict)  # shallower trees, same rounds
    head_reads: dict[int, list[list[tuple[int, int]]]] = field(default_factory=dict)  # per depth, per round, by budget
    best_scores: list[list[float]] | None = None  # per round: the best cumulative draft log-prob at each depth

    def expected_tau(self, budget: int, depth: int | None = None) -> float:
        budget = min(budget, self.max_budget)
        depth = self.depth if depth is None else min(depth, self.depth)
        if self.ranks is not None:
            ranks = self.ranks_at(depth)
            if not ranks:
                return 1.0
            return sum(accept_len_at_budget(r, budget) + 1 for r in ranks) / len(ranks)
        cover = 1.0 - DEFAULT_MISS ** ((budget - 1) / depth)
        tau, reach = 1.0, 1.0
        for a in (self.pos_acc or [])[:depth]:
            reach *= a * cover
            tau += reach
        return tau

    def reads_at(self, budget: int, depth: int | None = None) -> list[tuple[int, int]]:
        """Per calibration round: (slots with children, stops at a leaf) at this budget ([] without rounds: then
        `choose_budget` costs every slot, an upper bound)."""
        depth = self.depth if depth is None else min(depth, self.depth)
        b = max(2, min(budget, self.max_budget))
        return [r[b] for r in self.head_reads.get(depth) or []]

    def ranks_at(self, depth: int) -> list[list[int]]:
        """Per calibration round, the accepted path's score ranks in a tree drafted `depth` deep."""
        ranks = self.ranks if depth == self.depth else self.ranks_by_depth.get(depth)
        if ranks is None:
            raise ValueError(f"this profile has no ranks for depth {depth}")
        return ranks

    def stop_depth(self, round_: int, depth: int, depth_stop: float) -> int:
        """How deep calibration round `round_` would have drafted with this dynamic depth stop (build_tree's rule)."""
        best = self.best_scores[round_] if self.best_scores else []
        limit = stop_threshold(depth_stop)
        d = 1
        while d < depth and d <= len(best) and best[d - 1] >= limit:
            d += 1
        return d

    def stopped_rounds(
        self, budget: int, depth: int, depth_stop: float, top_k: int | None = None
    ) -> list[tuple[int, int, int, tuple[int, int]]]:
        """Per calibration round under a dynamic depth stop: (depth drafted, accept length, slots verified, LM-head
        reads (slots with children, stops at a leaf)). Read off the same rounds as τ(B): the nodes up to the depth
        drafted are the same."""
        if self.ranks is None or self.best_scores is None:
            raise ValueError("a dynamic depth stop is read off calibration rounds; this profile has none")
        out = []
        for r in range(len(self.ranks)):
            d = self.stop_depth(r, min(depth, self.depth), depth_stop)
            slots = min(budget, self.max_budget, max_useful_budget(d, top_k) if top_k else budget)
            reads = self.head_reads[d][r][max(2, slots)] if self.head_reads.get(d) else (slots, 0)
            out.append((d, accept_len_at_budget(self.ranks_at(d)[r], slots), slots, reads))
        return out

    def depths(self) -> list[int]:
        """Depths this profile can predict τ for."""
        if self.ranks is None:
            return list(range(1, self.depth + 1))
        return sorted(set(self.ranks_by_depth) | {self.depth})


def draft_ms_by_depth(events: Sequence[RoundEvent]) -> dict[int, float]:
    """Mean drafting milliseconds per depth over the draft rounds that recorded per-depth marks ({} if none did)."""
    marks = [e.draft_ms_by_depth for e in metrics.draft_rounds(events) if e.draft_ms_by_depth]
    depth = max((len(m) for m in marks), default=0)
    # A round near the context limit drafts fewer depths: each depth is averaged over the rounds that reached it.
    return {d: statistics.fmean(m[d - 1] for m in marks if len(m) >= d) for d in range(1, depth + 1)}


def best_scores_by_depth(event: RoundEvent) -> list[float]:
    """The best cumulative draft log-prob among the round's nodes at each depth (what a dynamic depth stop reads)."""
    best: list[float] = []
    for n in event.nodes:
        best.extend([-math.inf] * (n.depth - len(best)))
        best[n.depth - 1] = max(best[n.depth - 1], n.score)
    return best


def profile_from_events(
    events: Sequence[RoundEvent], max_budget: int, depth: int, prompts: int = 0
) -> AcceptanceProfile:
    rounds = metrics.draft_rounds(events)
    return AcceptanceProfile(
        source=f"calibration: {len(rounds)} rounds on {prompts} prompt(s) at budget {max_budget}",
        max_budget=max_budget,
        depth=depth,
        ranks=[accepted_ranks(e) for e in rounds],
        ranks_by_depth={d: [accepted_ranks(e, d) for e in rounds] for d in range(1, depth)},
        head_reads={d: [head_reads_by_budget(e, max_budget, d) for e in rounds] for d in range(1, depth + 1)},
        best_scores=[best_scores_by_depth(e) for e in rounds],
    )


def default_profile(depth: int, max_budget: int = MAX_BUDGET) -> AcceptanceProfile:
    alphas = list(DEFAULT_POS_ACC[:depth]) + [DEFAULT_TAIL] * max(0, depth - len(DEFAULT_POS_ACC))
    return AcceptanceProfile(
        source="default profile (published EAGLE-2 pos-acc with a coverage heuristic)",
        max_budget=max_budget,
        depth=depth,
        pos_acc=alphas,
    )


# ----- the choice ------------------------------------------------------------------------------------------------
@dataclass
class BudgetChoice:
    budget: int
    expected_tokens_per_s: float
    plain_tokens_per_s: float  # one forward over one token per new token: what plain decoding would reach
    profile_source: str
    draft_ms: float  # at the chosen depth
    fixed_ms: float  # per-round overhead that does not grow with the tree
    table: list[dict] = field(default_factory=list)  # per candidate: depth, budget, tau, round_ms, tokens_per_s
    depth: int | None = None  # the chosen draft depth (None: the configured one)
    depth_stop: float = 0.0  # the chosen dynamic depth stop (0: every round drafts the full depth)
    curve_measured: str = ""  # when the forward-time curve it was fitted on was measured (a new curve: fit again)
    head_rows: str = "read"  # how verification reads the LM head at this tree (`DecodeConfig.head_rows`)

    def describe(self) -> str:
        depth = f"depth {self.depth}, " if self.depth is not None else ""
        stop = f"stop below p {self.depth_stop:g}, " if self.depth_stop else ""
        rows = "LM head over every slot, " if self.head_rows == "all" else ""
        return (
            f"{depth}{stop}{rows}budget {self.budget}: expected {self.expected_tokens_per_s:.1f} tokens/s "
            f"(plain ≈ {self.plain_tokens_per_s:.1f}); τ from {self.profile_source}; "
            f"draft {self.draft_ms:.1f} ms + fixed overhead {self.fixed_ms:.1f} ms per round"
        )

    def to_json(self) -> dict:
        return asdict(self)


def max_useful_budget(depth: int, top_k: int) -> int:
    """Root plus every candidate EAGLE-2 drafts: top_k at depth 1, top_k² at each further depth."""
    return 1 + top_k + (depth - 1) * top_k * top_k


def draft_ms_at(draft_ms: float | Mapping[int, float], depth: int, full_depth: int) -> float:
    """Drafting milliseconds at `depth`: measured per depth when known, else the full depth's scaled by depth."""
    if isinstance(draft_ms, Mapping):
        if depth in draft_ms:
            return float(draft_ms[depth])
        return float(draft_ms[full_depth]) * depth / full_depth
    return float(draft_ms) * depth / full_depth


def choose_budget(
    curve: Curve,
    profile: AcceptanceProfile,
    draft_ms: float | Mapping[int, float],
    fixed_ms: float,
    candidates: Sequence[int] = CANDIDATE_BUDGETS,
    depth: int | None = None,
    top_k: int | None = None,
    choose_depth: bool = False,
    depth_stops: Sequence[float] = (0.0,),
) -> BudgetChoice:
    """The candidate with the highest τ(B, d) / round_ms(B, d),
    round_ms = draft(d) + forward(B) + head(B, d) + fixed, with the LM head read the cheaper way (`head_ms`).

    `draft_ms` is the drafting time per depth ({depth: ms}, from `draft_ms_by_depth`), or one figure at the
    profile's depth that shallower trees (with `choose_depth`) scale by depth. `depth_stops` are the dynamic depth
    stops to consider besides none; under a stop each calibration round is costed at the depth it would have drafted
    (new tokens over milliseconds, summed over rounds), which needs a calibrated profile."""
    full_depth = profile.depth  # the calibration's depth, which a single draft_ms was measured at
    top = min(full_depth, depth) if depth is not None else full_depth
    # A hand-made profile may know only its own depth: then that depth, with the budget capped as `depth` says.
    depths = [d for d in profile.depths() if d <= top and (choose_depth or d == top)] or [full_depth]
    stops = sorted({0.0, *depth_stops}) if profile.best_scores is not None else [0.0]
    table = []
    for d in depths:
        limit = profile.max_budget
        if top_k is not None:
            limit = min(limit, max_useful_budget(min(d, top), top_k))
        d_ms = draft_ms_at(draft_ms, d, full_depth)
        for b in sorted({c for c in candidates if 2 <= c <= limit} or {2}):
            for stop in stops:
                if stop == 0.0:
                    tau = profile.expected_tau(b, d)
                    reads = profile.reads_at(b, d)
                    head, how = head_ms(curve, reads, [b]) if reads else (curve.post_at(b), "read")
                    round_ms, mean_draft_ms = d_ms + curve.at(b) + head + fixed_ms, d_ms
                elif d > 1:
                    rounds = profile.stopped_rounds(b, d, stop, top_k)
                    n = max(1, len(rounds))
                    tau = sum(acc + 1 for _, acc, _, _ in rounds) / n if rounds else 1.0
                    head, how = head_ms(curve, [r for *_, r in rounds], [s for _, _, s, _ in rounds])
                    mean_draft_ms = sum(draft_ms_at(draft_ms, dr, full_depth) for dr, *_ in rounds) / n
                    round_ms = mean_draft_ms + fixed_ms + head + sum(curve.at(s) for _, _, s, _ in rounds) / n
                else:
                    continue  # a one-deep tree has nothing to stop
                table.append(
                    {
                        "depth": d,
                        "budget": b,
                        "depth_stop": stop,
                        "tau": tau,
                        "head_rows": how,
                        "head_ms": head,
                        "draft_ms": mean_draft_ms,
                        "round_ms": round_ms,
                        "tokens_per_s": 1000.0 * tau / round_ms,
                    }
                )
    # Ties go to the smaller tree, the shallower depth, then no stop.
    best = max(table, key=lambda row: (row["tokens_per_s"], -row["budget"], -row["depth"], -row["depth_stop"]))
    return BudgetChoice(
        budget=best["budget"],
        expected_tokens_per_s=best["tokens_per_s"],
        plain_tokens_per_s=1000.0 / (curve.at(1) + curve.post_at(1)),
        profile_source=profile.source,
        draft_ms=best["draft_ms"],
        fixed_ms=fixed_ms,
        table=table,
        depth=best["depth"] if choose_depth else None,
        depth_stop=best["depth_stop"],
        head_rows=best["head_rows"],
    )
