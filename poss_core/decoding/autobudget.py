"""`--tree-budget auto`: measure the target's forward time against the number of verified tokens (once per device and
model, cached as JSON), and pick the tree budget that maximises expected tokens per second for a draft.

Expected tokens/s at budget B = τ(B) / (draft_ms + forward_ms(B) + head(B) + fixed_ms) where
- forward_ms(B) is the measured curve: the verify forward over B tokens up to the hidden states, at a 256-token
  context; head_ms(r) is measured with it: the LM head over r of those rows and the per-row work greedy verification
  does on them (to the CPU, argmax, log-normaliser). Both are medians, made non-decreasing (noise can only make a
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

import json
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from .. import metrics
from ..models.target import TargetModel, causal_allowed, truncate_cache_layer
from .config import DecodeConfig
from .events import RoundEvent
from .tree import stop_threshold

CANDIDATE_BUDGETS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 60, 64, 80, 96, 128)
MAX_BUDGET = 96
# Dynamic depth stops `auto` considers (0: every round drafts the full depth; see DecodeConfig.depth_stop).
DEPTH_STOPS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3)
CURVE_CONTEXT = 256
DEFAULT_POS_ACC = (0.920, 0.784, 0.717, 0.671)  # EAGLE-2, reference §6; later positions use DEFAULT_TAIL
DEFAULT_TAIL = 0.65
DEFAULT_MISS = 0.4  # coverage heuristic: each further kept candidate catches 60% of what is left
# Written for calibration (chat, code, arithmetic, a fact, a summary, an instruction); never the evaluation sets.
CALIBRATION_PROMPTS = (
    "Explain why the sky is blue in a short paragraph.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "A baker makes 24 rolls in the morning and twice as many in the afternoon. How many rolls does he make a day?",
    "Who wrote the novel Pride and Prejudice, and when was it published?",
    "Summarize in two sentences: The town council voted on Tuesday to build a new library next to the park. "
    "Construction starts in spring and should take eighteen months.",
    "Give three tips for staying focused while studying.",
)


# ----- the forward-time curve ------------------------------------------------------------------------------------
@dataclass
class ForwardCurve:
    """Median milliseconds of one target forward over n new tokens (hidden states only), and of the LM head plus
    greedy post-processing over n rows, at a fixed context length; both non-decreasing in n."""

    key: str
    sizes: list[int]
    ms: list[float]
    context: int
    measured: str = ""
    post_ms: list[float] | None = None
    busy_load: float = 0.0  # the CPU load average when it was measured, if other work kept the CPU busy (else 0)

    def due_again(self, device: torch.device | None = None) -> bool:
        """Measured while the machine was busy, and it is quiet now: measure again (and refit what used it)."""
        return bool(self.busy_load) and not machine_busy(device)

    @staticmethod
    def _interp(xs: list[int], ys: list[float], n: float) -> float:
        """Piecewise-linear interpolation; beyond the last size, the last segment's slope."""
        if n <= xs[0]:
            return ys[0]
        for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
            if n <= x1:
                return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
        if len(xs) == 1:
            return ys[-1]
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return ys[-1] + slope * (n - xs[-1])

    def at(self, n: float) -> float:
        """The forward's milliseconds for n verified tokens."""
        return self._interp(self.sizes, self.ms, n)

    def post_at(self, n: float) -> float:
        """The LM head and post-processing milliseconds for n rows (0 for curves measured without it)."""
        return self._interp(self.sizes, self.post_ms, n) if self.post_ms else 0.0

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict) -> "ForwardCurve":
        post = obj.get("post_ms")
        return cls(key=obj["key"], sizes=[int(s) for s in obj["sizes"]], ms=[float(m) for m in obj["ms"]],
                   context=int(obj["context"]), measured=obj.get("measured", ""),
                   post_ms=[float(m) for m in post] if post else None, busy_load=float(obj.get("busy_load", 0.0)))


def non_decreasing(values: Sequence[float]) -> list[float]:
    """The closest non-decreasing sequence in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, c1), (m2, c2) = blocks[-2], blocks[-1]
            blocks[-2:] = [[(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2]]
    return [m for m, c in blocks for _ in range(int(c))]


def device_description(device: torch.device) -> str:
    """The hardware a timing belongs to: GPU name, or CPU model, core count and torch threads."""
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{device.type}:{name}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


# What a curve measures; a curve cached under another version measured something else and is measured again.
CURVE_VERSION = "verify v2: forward to hidden states + LM head on the rows read"


def curve_key(target: TargetModel) -> str:
    """Device + model shape + dtype + quantization + torch version: what a forward's cost depends on."""
    c = target.config
    model = (f"{getattr(c, 'model_type', '?')} h{target.hidden_size} l{getattr(c, 'num_hidden_layers', '?')} "
             f"a{getattr(c, 'num_attention_heads', '?')}/{getattr(c, 'num_key_value_heads', '?')} "
             f"i{getattr(c, 'intermediate_size', '?')} v{target.vocab_size}")
    return (f"{device_description(target.device)} | {model} | {target.dtype} {target.quantization} | "
            f"torch {torch.__version__} | {CURVE_VERSION}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def machine_busy(device: torch.device | None = None) -> float:
    """The 1-minute load average if other work keeps this machine's CPUs busy, else 0.0. Timings taken then are
    too slow and would be cached as this machine's, so a curve measured busy is measured again once it is quiet.
    (The app's own decoding uses half the cores, below the threshold; a GPU's forward is not measured this way.)"""
    if device is not None and device.type != "cpu":
        return 0.0
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average on this platform: assume quiet
        return 0.0
    return load if load >= max(1.25, 0.75 * (os.cpu_count() or 1)) else 0.0


@torch.inference_mode()
def measure_forward_curve(target: TargetModel, sizes: Sequence[int] = CANDIDATE_BUDGETS, context: int = CURVE_CONTEXT,
                          repeats: int = 5, seed: int = 0) -> ForwardCurve:
    """Time the verify forward (n tokens after a `context`-token cache, to the hidden states) and the LM head with
    greedy post-processing over n rows, for each n; sizes are visited in a shuffled order per repeat so drift in
    machine speed spreads over all of them; the median is kept."""
    sizes = sorted({int(s) for s in sizes if s >= 1} | {1})
    busy = machine_busy(target.device)  # read before our own work adds to the load
    context = max(1, min(context, target.max_context - max(sizes) - 1))
    gen = torch.Generator().manual_seed(seed)
    vocab = target.vocab_size
    cache = target.new_cache()
    target.forward(torch.randint(0, vocab, (context,), generator=gen), torch.arange(context),
                   causal_allowed(context, 0), cache, logits="none")
    layers = len(cache.layers)

    def once(n: int) -> tuple[float, float]:
        tokens = torch.randint(0, vocab, (n,), generator=gen)
        _sync(target.device)
        t0 = time.perf_counter()
        out = target.forward(tokens, context + torch.arange(n), causal_allowed(n, context), cache, logits="none")
        _sync(target.device)
        t1 = time.perf_counter()
        # What greedy verification does per row it reads: the LM head, to the CPU, argmax, log-normaliser.
        logits = target.logits(out.hidden)
        logits.argmax(dim=-1)
        torch.logsumexp(logits, dim=-1)
        t2 = time.perf_counter()
        for i in range(layers):
            truncate_cache_layer(cache, i, context)
        return (t1 - t0) * 1000.0, (t2 - t1) * 1000.0

    for n in (1, max(sizes), 1):  # warm-up
        once(n)
    times: dict[int, list[tuple[float, float]]] = {n: [] for n in sizes}
    rng = random.Random(seed)
    for _ in range(repeats):
        order = list(sizes)
        rng.shuffle(order)
        for n in order:
            times[n].append(once(n))
    forward = [statistics.median(t[0] for t in times[n]) for n in sizes]
    post = [statistics.median(t[1] for t in times[n]) for n in sizes]
    return ForwardCurve(key=curve_key(target), sizes=sizes, ms=non_decreasing(forward), context=context,
                        measured=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                        post_ms=non_decreasing(post), busy_load=busy)


def curve_cache_path() -> Path:
    from ..models.default_model import cache_root

    return cache_root() / "forward_curves.json"


def load_or_measure_curve(target: TargetModel, path: Path | None = None, remeasure: bool = False,
                          log=None, **measure_kwargs) -> ForwardCurve:
    """The cached curve for this device and model, or a fresh measurement (saved for next time)."""
    path = Path(path) if path is not None else curve_cache_path()
    key = curve_key(target)
    store = read_store(path)
    say = log or _say
    if not remeasure and key in store:
        cached = ForwardCurve.from_json(store[key])
        if not cached.due_again(target.device):
            return cached
        say(f"the cached forward-time curve was measured while the machine was busy (load {cached.busy_load:.1f}); "
            f"measuring it again now that it is quiet")
    say(f"measuring the target's forward time vs verified tokens once for this device ({key}) ...")
    curve = measure_forward_curve(target, **measure_kwargs)
    if curve.busy_load:
        say(f"the machine is busy (load {curve.busy_load:.1f} on {os.cpu_count()} cores): these timings are too slow, "
            f"and they are measured again the first time it is quiet")
    write_store(path, key, curve.to_json())
    say(f"forward-time curve saved to {path}")
    return curve


def _say(msg: str) -> None:
    print(f"[poss] {msg}", file=sys.stderr, flush=True)


def read_store(path: Path) -> dict:
    """A JSON cache file as a dict (empty when missing or unreadable: a cache is never worth an error)."""
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def write_store(path: Path, key: str, value) -> None:
    """Set one entry of a JSON cache file (re-read first, so other entries written meanwhile are kept)."""
    store = read_store(path)
    store[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(store, indent=1))
    tmp.replace(path)


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


def head_reads_by_budget(event: RoundEvent, max_budget: int,
                         max_depth: int | None = None) -> list[tuple[int, int]]:
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


def head_ms(curve: "ForwardCurve", reads: Sequence[tuple[int, int]], slots: Sequence[int]) -> tuple[float, str]:
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

    def stopped_rounds(self, budget: int, depth: int, depth_stop: float,
                       top_k: int | None = None) -> list[tuple[int, int, int, tuple[int, int]]]:
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


def profile_from_events(events: Sequence[RoundEvent], max_budget: int, depth: int, prompts: int = 0) -> AcceptanceProfile:
    rounds = metrics.draft_rounds(events)
    return AcceptanceProfile(source=f"calibration: {len(rounds)} rounds on {prompts} prompt(s) at budget {max_budget}",
                             max_budget=max_budget, depth=depth, ranks=[accepted_ranks(e) for e in rounds],
                             ranks_by_depth={d: [accepted_ranks(e, d) for e in rounds] for d in range(1, depth)},
                             head_reads={d: [head_reads_by_budget(e, max_budget, d) for e in rounds]
                                         for d in range(1, depth + 1)},
                             best_scores=[best_scores_by_depth(e) for e in rounds])


def default_profile(depth: int, max_budget: int = MAX_BUDGET) -> AcceptanceProfile:
    alphas = list(DEFAULT_POS_ACC[:depth]) + [DEFAULT_TAIL] * max(0, depth - len(DEFAULT_POS_ACC))
    return AcceptanceProfile(source="default profile (published EAGLE-2 pos-acc with a coverage heuristic)",
                             max_budget=max_budget, depth=depth, pos_acc=alphas)


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
        return (f"{depth}{stop}{rows}budget {self.budget}: expected {self.expected_tokens_per_s:.1f} tokens/s "
                f"(plain ≈ {self.plain_tokens_per_s:.1f}); τ from {self.profile_source}; "
                f"draft {self.draft_ms:.1f} ms + fixed overhead {self.fixed_ms:.1f} ms per round")

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


def choose_budget(curve: ForwardCurve, profile: AcceptanceProfile, draft_ms: float | Mapping[int, float],
                  fixed_ms: float, candidates: Sequence[int] = CANDIDATE_BUDGETS, depth: int | None = None,
                  top_k: int | None = None, choose_depth: bool = False,
                  depth_stops: Sequence[float] = (0.0,)) -> BudgetChoice:
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
                table.append({"depth": d, "budget": b, "depth_stop": stop, "tau": tau, "head_rows": how,
                              "head_ms": head, "draft_ms": mean_draft_ms, "round_ms": round_ms,
                              "tokens_per_s": 1000.0 * tau / round_ms})
    # Ties go to the smaller tree, the shallower depth, then no stop.
    best = max(table, key=lambda row: (row["tokens_per_s"], -row["budget"], -row["depth"], -row["depth_stop"]))
    return BudgetChoice(budget=best["budget"], expected_tokens_per_s=best["tokens_per_s"],
                        plain_tokens_per_s=1000.0 / (curve.at(1) + curve.post_at(1)), profile_source=profile.source,
                        draft_ms=best["draft_ms"], fixed_ms=fixed_ms, table=table,
                        depth=best["depth"] if choose_depth else None, depth_stop=best["depth_stop"],
                        head_rows=best["head_rows"])


def calibrate(target: TargetModel, draft, config: DecodeConfig, prompts: Sequence[Sequence[int]],
              max_budget: int = MAX_BUDGET, max_new_tokens: int = 48) -> tuple[list[RoundEvent], int]:
    """Decode the prompts at the largest budget considered; return every event and that budget."""
    from .decoder import SpeculativeDecoder
    from .events import DecodeSummary

    budget = max(2, min(max_budget, max_useful_budget(config.depth, config.top_k)))
    # Every round drafts the full depth: what a dynamic depth stop would have cut is read off these rounds.
    cfg = replace(config, tree_budget=budget, max_new_tokens=max_new_tokens, depth_stop=0.0, head_rows="read")
    decoder = SpeculativeDecoder(target, draft, cfg)
    events: list[RoundEvent] = []
    for ids in prompts:
        for item in decoder.generate(list(ids)):
            if not isinstance(item, DecodeSummary):
                events.append(item)
    return events, budget


def auto_tree_budget(target: TargetModel, draft, config: DecodeConfig, prompts: Sequence[Sequence[int]] | None = None,
                     profile: str = "calibrate", max_budget: int = MAX_BUDGET, calibration_tokens: int = 48,
                     curve: ForwardCurve | None = None, remeasure: bool = False, log=None,
                     choose_depth: bool = True, depth_stops: Sequence[float] = DEPTH_STOPS) -> BudgetChoice:
    """Pick the tree budget (and, with `choose_depth`, a depth up to the configured one; and a dynamic depth stop
    among `depth_stops`) for this target, draft and hardware (see the module docstring).

    `prompts` are token-id lists for the calibration decode (default: built-in prompts, never the evaluation sets);
    `profile="default"` keeps the calibration's timings but takes τ(B) from the default profile."""
    from .decoder import encode_prompt

    if profile not in ("calibrate", "default"):
        raise ValueError(f"profile={profile!r}: use 'calibrate' or 'default'")
    curve = curve or load_or_measure_curve(target, remeasure=remeasure, log=log)
    if prompts is None:
        prompts = [encode_prompt(target.tokenizer, p) for p in CALIBRATION_PROMPTS]
    events, budget = calibrate(target, draft, config, prompts, max_budget, calibration_tokens)
    split = metrics.time_split(events)
    draft_ms: float | dict[int, float] = split["draft_ms"] if not math.isnan(split["draft_ms"]) else 0.0
    by_depth = draft_ms_by_depth(events)
    if by_depth:
        draft_ms = by_depth
    overhead_ms = split["overhead_ms"] if not math.isnan(split["overhead_ms"]) else 0.0
    prof = (profile_from_events(events, budget, config.depth, len(prompts)) if profile == "calibrate"
            else default_profile(config.depth, budget))
    # The measured overhead is the engine's own (argmax over a few rows, the cache commit, events): the LM head, a
    # leaf's second call included, counts as verify time, which `head_ms` costs per tree from the curve instead.
    fixed_ms = overhead_ms
    choice = choose_budget(curve, prof, draft_ms, fixed_ms, depth=config.depth, top_k=config.top_k,
                           choose_depth=choose_depth, depth_stops=depth_stops)
    choice.curve_measured = curve.measured
    return choice


# ----- a cached choice per draft (the app) ------------------------------------------------------------------------
def draft_fingerprint(draft) -> str:
    """Identifies a draft's trained weights cheaply: its kind and a hash of its fc layer."""
    import hashlib

    digest = hashlib.sha1(draft.fc.weight.detach().float().cpu().numpy().tobytes()).hexdigest()[:12]
    return f"{draft.spec.label} fc:{digest}"


def choice_cache_path() -> Path:
    from ..models.default_model import cache_root

    return cache_root() / "auto_budgets.json"


def cached_choice_key(target: TargetModel, draft, config: DecodeConfig) -> str:
    # "stops", "rows": choices cached before the depth stop and the LM-head reading were chosen are fitted again.
    return (f"{curve_key(target)} | {draft_fingerprint(draft)} | depth {config.depth} top_k {config.top_k} | stops"
            f" | rows")


def known_budget_choice(target: TargetModel, draft, config: DecodeConfig, path: Path | None = None,
                        curve: ForwardCurve | None = None) -> BudgetChoice | None:
    """The cached choice for this hardware, target, draft, depth and top_k, if one was calibrated before on the
    forward-time curve in use (`curve`, else the cached one; none if that is missing or due to be measured again)."""
    path = Path(path) if path is not None else choice_cache_path()
    known = read_store(path).get(cached_choice_key(target, draft, config))
    if known is None:
        return None
    if curve is None:
        stored = read_store(curve_cache_path()).get(curve_key(target))
        if stored is None:
            return None
        curve = ForwardCurve.from_json(stored)
        if curve.due_again(target.device):
            return None
    choice = BudgetChoice(**known)
    return choice if choice.curve_measured == curve.measured else None


def cached_budget_choice(target: TargetModel, draft, config: DecodeConfig, path: Path | None = None,
                         calibration_prompts: int = 3, calibration_tokens: int = 32, log=None,
                         **auto_kwargs) -> BudgetChoice:
    """The tree budget for this hardware, target, draft, depth and top_k, at the configured depth (the app keeps the
    depth the user chose: the tree and the per-position charts are what it shows). Calibrated once (a few seconds
    to a minute on a CPU) and cached as JSON beside the forward-time curve."""
    from .decoder import encode_prompt

    known = known_budget_choice(target, draft, config, path, curve=auto_kwargs.get("curve"))
    if known is not None:
        return known
    path = Path(path) if path is not None else choice_cache_path()
    prompts = [encode_prompt(target.tokenizer, p) for p in CALIBRATION_PROMPTS[:calibration_prompts]]
    (log or _say)(f"fitting the tree budget of {draft.spec.label} to this machine (once) ...")
    choice = auto_tree_budget(target, draft, config, prompts=prompts, calibration_tokens=calibration_tokens,
                              log=log, choose_depth=False, **auto_kwargs)
    write_store(path, cached_choice_key(target, draft, config), choice.to_json())
    return choice
