"""EAGLE-2 dynamic draft tree: expand the top_k best frontier nodes per depth, keep the best `tree_budget - 1`."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from ..models.draft import DraftKV, DraftModel, DraftState
from ..models.target import causal_allowed, float_mask


@dataclass
class DraftTree:
    """The kept nodes of one round, parents before children. Parent -1 is the root (the last verified token)."""

    tokens: torch.Tensor  # [M] full-vocabulary ids
    parents: torch.Tensor  # [M] node index or -1
    depths: torch.Tensor  # [M] 1-based
    scores: torch.Tensor  # [M] cumulative draft log-prob
    draft_probs: torch.Tensor  # [M]
    specialists: torch.Tensor  # [M]
    root_feature: torch.Tensor | None  # [H] the draft's predicted feature at the root's position
    node_features: torch.Tensor  # [M, H] the draft's predicted feature at each node (zeros where not computed)
    has_feature: torch.Tensor  # [M] bool
    # Milliseconds from the start of drafting to the end of each depth's expansion (entry d-1: depth d): what the
    # tree would have cost drafted only d deep, before pruning (`--tree-budget auto` reads it).
    depth_ms: list[float] = field(default_factory=list)

    @property
    def size(self) -> int:
        return int(self.tokens.numel())

    @staticmethod
    def empty(hidden_size: int = 1) -> "DraftTree":
        z = torch.zeros(0, dtype=torch.long)
        return DraftTree(
            z,
            z,
            z,
            torch.zeros(0),
            torch.zeros(0),
            z,
            None,
            torch.zeros(0, hidden_size),
            torch.zeros(0, dtype=torch.bool),
        )

    def ancestors(self) -> torch.Tensor:
        """Bool [M+1, M+1] over root (row 0) and nodes: entry (i, j) says j is i itself or an ancestor of i."""
        m = self.size
        slots = self.parents + 1  # slot of each node's parent (root is slot 0)
        anc = torch.eye(m + 1, dtype=torch.bool)
        anc[:, 0] = True
        if m == 0:
            return anc
        rows = torch.arange(1, m + 1)
        cur = slots.clone()
        # Walk up one generation per step; the deepest node needs depth-1 steps.
        for _ in range(int(self.depths.max())):
            valid = cur > 0
            if not bool(valid.any()):
                break
            anc[rows[valid], cur[valid]] = True
            cur = torch.where(valid, slots[(cur - 1).clamp(min=0)], cur)
        return anc

    def children(self) -> list[list[int]]:
        """Children of each slot (0 = root, i+1 = node i), best draft score first."""
        kids: list[list[int]] = [[] for _ in range(self.size + 1)]
        order = torch.argsort(self.scores, descending=True, stable=True).tolist() if self.size else []
        parents = self.parents.tolist()
        for i in order:
            kids[parents[i] + 1].append(i)
        return kids


class _TreeRows:
    """Tree rows drafted so far this round: inputs, positions and ancestor sets, in depth order."""

    def __init__(self, capacity: int, hidden: int, device, dtype) -> None:
        self.tokens = torch.empty(capacity, dtype=torch.long, device=device)  # [R] full-vocabulary ids
        self.features = torch.empty(capacity, hidden, dtype=dtype, device=device)  # [R, H] the feature each reads
        self.depths = torch.empty(capacity, dtype=torch.long, device=device)  # [R] 1-based
        self.anc = torch.zeros(capacity, capacity, dtype=torch.bool, device=device)  # [R, R] j is i or an ancestor
        self.count = 0

    def add(self, tokens: torch.Tensor, features: torch.Tensor, depth: int, parent_rows: torch.Tensor | None) -> None:
        n, r = int(tokens.numel()), self.count
        self.tokens[r : r + n] = tokens
        self.features[r : r + n] = features
        self.depths[r : r + n] = depth
        if parent_rows is not None:
            self.anc[r : r + n] = self.anc[parent_rows]
        self.anc[r : r + n, r : r + n].fill_diagonal_(True)
        self.count += n


def _run_group(draft: DraftModel, state: DraftState, rows: _TreeRows, group: int, done: list[int]) -> torch.Tensor:
    """Let specialist `group` read every context and tree row it has not read; return its outputs for those rows."""
    ctx_tokens, ctx_feats, start = state.pending(group)
    n_ctx = int(ctx_tokens.numel())
    r0, r1 = done[group], rows.count
    if n_ctx and r0:
        raise RuntimeError("a specialist read tree rows before the context: the draft state is inconsistent")
    c = state.num_rows
    device = rows.tokens.device
    if n_ctx:
        tokens = torch.cat([ctx_tokens, rows.tokens[r0:r1]])  # [q] = [n_ctx + r1 - r0]
        feats = torch.cat([ctx_feats, rows.features[r0:r1]])  # [q, H]
        positions = torch.cat([torch.arange(start, c, device=device), c - 1 + rows.depths[r0:r1]])  # [q]
    else:  # a specialist already up to date with the context: only tree rows (the common case past depth 1)
        tokens, feats, positions = rows.tokens[r0:r1], rows.features[r0:r1], c - 1 + rows.depths[r0:r1]
    past = start + r0
    q = int(tokens.numel())
    # Keys: the c context rows, then the r1 tree rows (past + q == c + r1 either way).
    allowed = torch.empty(q, past + q, dtype=torch.bool, device=device)  # [q, c + r1]
    if n_ctx:  # new context rows: the cache and each other causally, no tree row
        allowed[:n_ctx, :c] = causal_allowed(n_ctx, start, device)
        allowed[:n_ctx, c:] = False
    if r1 > r0:  # tree rows: the whole context and their ancestors
        allowed[n_ctx:, :c] = True
        allowed[n_ctx:, c:] = rows.anc[r0:r1, :r1]
    mask = allowed if isinstance(state.cache, DraftKV) else float_mask(allowed, feats.dtype)
    out = draft.run_specialist(group, tokens[None], feats[None], positions[None], mask, state.cache)[0]  # [q, H]
    if n_ctx:
        state.mark_read(group)
    done[group] = r1
    return out


@dataclass
class _Candidates:
    """Every candidate drafted this round, by depth: depth 1 has k, every further depth k*k (k children of each of
    the k frontier nodes). Candidate indices count through the depths in this order (torch.cat of each list)."""

    tokens: list[torch.Tensor]  # per depth: [k], then [k*k] full-vocabulary ids
    parents: list[torch.Tensor]  # per depth: [k] candidate index each group of k hangs from (depth 1: -1, the root)
    scores: list[torch.Tensor]  # per depth: [k] / [k*k] cumulative draft log-prob
    logp: list[torch.Tensor]  # per depth: [k] / [k*k] the draft's log-prob of the token itself
    groups: list[int]  # per depth: the specialist that drafted it
    # The draft's predicted feature at each expanded candidate: row j of torch.cat(feature_rows) belongs to
    # candidate feature_of[j] (a tensor lookup at pruning, no loop over nodes).
    feature_rows: list[torch.Tensor] = field(default_factory=list)  # per expanded depth: [k, H]
    feature_of: list[torch.Tensor] = field(default_factory=list)  # per expanded depth: [k] candidate indices

    @property
    def count(self) -> int:
        return sum(int(t.numel()) for t in self.tokens)

    def add(self, tokens: torch.Tensor, parents: torch.Tensor, scores: torch.Tensor, logp: torch.Tensor, group: int):
        self.tokens.append(tokens)
        self.parents.append(parents)
        self.scores.append(scores)
        self.logp.append(logp)
        self.groups.append(group)

    def pruned(self, root_feature: torch.Tensor, tree_budget: int) -> DraftTree:
        """The best `tree_budget - 1` candidates as a tree (`_prune`)."""
        k, device = int(self.tokens[0].numel()), self.parents[0].device
        sizes = torch.tensor([k] + [k * k] * (len(self.groups) - 1), device=device)  # [D] candidates per depth
        parents = torch.cat([self.parents[0]] + [p.repeat_interleave(k) for p in self.parents[1:]])  # [N]
        depths = torch.repeat_interleave(torch.arange(1, len(self.groups) + 1, device=device), sizes)  # [N]
        return _prune(
            torch.cat(self.tokens),
            parents,
            depths,
            torch.cat(self.scores),
            torch.cat(self.logp),
            torch.repeat_interleave(torch.tensor(self.groups, device=device), sizes),
            root_feature,
            self.feature_rows,
            self.feature_of,
            tree_budget,
        )


@dataclass
class _Frontier:
    """The k best candidates of the deepest depth drafted so far, best first: the parents of the next depth."""

    index: torch.Tensor  # [k] candidate indices
    tokens: torch.Tensor  # [k] full-vocabulary ids
    scores: torch.Tensor  # [k] cumulative draft log-prob, descending (topk sorts)
    features: torch.Tensor  # [k, H] the feature each is drafted from: its parent's predicted feature
    parent_rows: torch.Tensor | None  # [k] the tree row of each one's parent (None at depth 1: the root has none)


@torch.inference_mode()
def build_tree(
    draft: DraftModel, state: DraftState, depth: int, top_k: int, tree_budget: int, depth_stop: float = 0.0
) -> DraftTree:
    """Draft one EAGLE-2 tree from the draft's state (which must hold the newly verified context rows).

    With `depth_stop` > 0 drafting ends early, after the first depth whose best cumulative draft probability is
    below it: a deeper node could only score lower, so it would rarely be kept and more rarely accepted."""
    t0 = time.perf_counter()
    device, dtype = draft.fc.weight.device, draft.fc.weight.dtype
    k = min(top_k, draft.draft_vocab_size)
    rows = _TreeRows(k * max(depth - 1, 0), draft.config.hidden_size, device, dtype)
    done = [0] * draft.num_specialists
    state.begin_tree()

    g0 = draft.specialist_of(1)
    root_feature = _run_group(draft, state, rows, g0, done)[-1]  # [H] predicted at the root's position
    logp = torch.log_softmax(draft.head_logits(root_feature).float(), dim=-1)  # [V_draft]
    top = torch.topk(logp, k)  # [k] values and draft-vocabulary indices
    first = draft.to_full_vocab(top.indices)
    cands = _Candidates(
        [first], [torch.full((k,), -1, dtype=torch.long, device=device)], [top.values], [top.values], [g0]
    )
    front = _Frontier(torch.arange(k, device=device), first, top.values, root_feature.expand(k, -1), None)
    depth_ms = [ms_since(t0)]
    stop_below = stop_threshold(depth_stop)
    for d in range(1, depth):
        # topk sorts: entry 0 is the best path at depth d. Without a stop, no read-back (a device sync on a GPU).
        if depth_stop > 0 and float(front.scores[0]) < stop_below:
            break
        rows.add(front.tokens, front.features, d, front.parent_rows)
        g = draft.specialist_of(d + 1)
        out = _run_group(draft, state, rows, g, done)[-k:]  # [k, H] predicted at each frontier node
        front = _expand(draft, cands, front, out, g, k, rows.count)
        depth_ms.append(ms_since(t0))
    state.reset_tree()
    tree = cands.pruned(root_feature, tree_budget)
    tree.depth_ms = depth_ms
    return tree


def _expand(
    draft: DraftModel, cands: _Candidates, front: _Frontier, out: torch.Tensor, group: int, k: int, row_count: int
) -> _Frontier:
    """One depth deeper: each frontier node's k best children join the candidates (specialist `group` predicted
    `out`, [k, H], at the frontier's rows); the k best of those k*k by cumulative score are the next frontier."""
    cands.feature_rows.append(out)
    cands.feature_of.append(front.index)
    logp = torch.log_softmax(draft.head_logits(out).float(), dim=-1)  # [k, V_draft]
    top = torch.topk(logp, k, dim=-1)  # [k, k]: row i holds frontier node i's children
    cum = (front.scores[:, None] + top.values).reshape(-1)  # [k*k]
    tokens = draft.to_full_vocab(top.indices).reshape(-1)  # [k*k]
    base = cands.count  # the index of this depth's first candidate
    cands.add(tokens, front.index, cum, top.values.reshape(-1), group)
    best = torch.topk(cum, k)  # [k]
    parent = best.indices // k  # [k] which frontier row each new frontier node hangs from
    return _Frontier(base + best.indices, tokens[best.indices], best.values, out[parent], parent + (row_count - k))


def stop_threshold(depth_stop: float) -> float:
    """The cumulative draft log-prob below which a dynamic depth stop ends drafting (-inf: never); `build_tree`
    applies it while drafting, `--tree-budget auto` to recorded rounds."""
    return math.log(depth_stop) if depth_stop > 0 else -math.inf


def ms_since(t0: float) -> float:
    """Milliseconds since t0 (no device sync of its own: each depth of a tree already waits for its frontier)."""
    return (time.perf_counter() - t0) * 1000.0


def _prune(
    tokens, parents, depths, scores, logp, groups, root_feature, feature_rows, feature_of, tree_budget
) -> DraftTree:
    """Keep the best `tree_budget - 1` candidates. A child's score never exceeds its parent's; the small depth
    penalty breaks exact ties (log-prob 0) in the parent's favour, so the kept set is always a tree."""
    n = int(scores.numel())  # every candidate: tokens, parents, depths, scores, logp and groups are [N]
    keep = min(tree_budget - 1, n)
    key = scores.double() - 1e-9 * depths.double()  # [N]
    sel = torch.sort(torch.topk(key, keep).indices).values  # [M] creation order: parents before children
    remap = torch.full((n + 1,), -1, dtype=torch.long, device=scores.device)  # [N+1] slot -> kept index or -1
    remap[sel + 1] = torch.arange(keep, device=scores.device)
    new_parents = remap[parents[sel] + 1]  # [M]
    h = root_feature.shape[-1]
    node_features = torch.zeros(keep, h, dtype=root_feature.dtype, device=root_feature.device)  # [M, H]
    if feature_rows:
        row_of = torch.full((n,), -1, dtype=torch.long, device=scores.device)  # [N] candidate -> feature row or -1
        row_of[torch.cat(feature_of)] = torch.arange(sum(int(f.numel()) for f in feature_of), device=scores.device)
        rows = row_of[sel]  # [M]
        has = rows >= 0  # [M]
        node_features[has] = torch.cat(feature_rows)[rows[has]]
        has_feature = has.cpu()
    else:
        has_feature = torch.zeros(keep, dtype=torch.bool)
    return DraftTree(
        tokens[sel].cpu(),
        new_parents.cpu(),
        depths[sel].cpu(),
        scores[sel].float().cpu(),
        logp[sel].exp().float().cpu(),
        groups[sel].cpu(),
        root_feature,
        node_features,
        has_feature,
    )
