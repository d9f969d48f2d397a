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
        self.tokens = torch.empty(capacity, dtype=torch.long, device=device)
        self.features = torch.empty(capacity, hidden, dtype=dtype, device=device)
        self.depths = torch.empty(capacity, dtype=torch.long, device=device)
        self.anc = torch.zeros(capacity, capacity, dtype=torch.bool, device=device)
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
        tokens = torch.cat([ctx_tokens, rows.tokens[r0:r1]])
        feats = torch.cat([ctx_feats, rows.features[r0:r1]])
        positions = torch.cat([torch.arange(start, c, device=device), c - 1 + rows.depths[r0:r1]])
    else:  # a specialist already up to date with the context: only tree rows (the common case past depth 1)
        tokens, feats, positions = rows.tokens[r0:r1], rows.features[r0:r1], c - 1 + rows.depths[r0:r1]
    past = start + r0
    q = int(tokens.numel())
    # Keys: the c context rows, then the r1 tree rows (past + q == c + r1 either way).
    allowed = torch.empty(q, past + q, dtype=torch.bool, device=device)
    if n_ctx:  # new context rows: the cache and each other causally, no tree row
        allowed[:n_ctx, :c] = causal_allowed(n_ctx, start, device)
        allowed[:n_ctx, c:] = False
    if r1 > r0:  # tree rows: the whole context and their ancestors
        allowed[n_ctx:, :c] = True
        allowed[n_ctx:, c:] = rows.anc[r0:r1, :r1]
    mask = allowed if isinstance(state.cache, DraftKV) else float_mask(allowed, feats.dtype)
    out = draft.run_specialist(group, tokens[None], feats[None], positions[None], mask, state.cache)[0]
    if n_ctx:
        state.mark_read(group)
    done[group] = r1
    return out


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
    root_feature = _run_group(draft, state, rows, g0, done)[-1]
    logp = torch.log_softmax(draft.head_logits(root_feature).float(), dim=-1)
    top = torch.topk(logp, k)
    # Candidates by depth: depth 1 has k, every further depth k*k (k children of each of the k frontier nodes).
    cand_tokens = [draft.to_full_vocab(top.indices)]
    cand_parents = [torch.full((k,), -1, dtype=torch.long, device=device)]
    cand_scores = [top.values]
    cand_logp = [top.values]
    groups = [g0]
    # The draft's predicted feature at each expanded candidate: row j of torch.cat(feature_rows) belongs to
    # candidate feature_of[j] (a tensor lookup at pruning, no loop over nodes).
    feature_rows: list[torch.Tensor] = []
    feature_of: list[torch.Tensor] = []

    frontier = torch.arange(k, device=device)  # candidate indices
    frontier_tokens = cand_tokens[0]
    frontier_scores = top.values
    frontier_feats = root_feature.expand(k, -1)
    frontier_parent_rows: torch.Tensor | None = None
    n_cand = k
    depth_ms = [ms_since(t0)]
    stop_below = stop_threshold(depth_stop)
    for d in range(1, depth):
        # topk sorts: entry 0 is the best path at depth d. Without a stop, no read-back (a device sync on a GPU).
        if depth_stop > 0 and float(frontier_scores[0]) < stop_below:
            break
        rows.add(frontier_tokens, frontier_feats, d, frontier_parent_rows)
        g = draft.specialist_of(d + 1)
        out = _run_group(draft, state, rows, g, done)[-k:]
        feature_rows.append(out)
        feature_of.append(frontier)
        logp = torch.log_softmax(draft.head_logits(out).float(), dim=-1)
        top = torch.topk(logp, k, dim=-1)
        cum = (frontier_scores[:, None] + top.values).reshape(-1)
        tokens = draft.to_full_vocab(top.indices).reshape(-1)
        cand_tokens.append(tokens)
        cand_parents.append(frontier)
        cand_scores.append(cum)
        cand_logp.append(top.values.reshape(-1))
        groups.append(g)
        best = torch.topk(cum, k)
        parent = best.indices // k  # which frontier row each new frontier node hangs from
        frontier_parent_rows = parent + (rows.count - k)
        frontier_feats = out[parent]
        frontier_tokens = tokens[best.indices]
        frontier_scores = best.values
        frontier = n_cand + best.indices
        n_cand += k * k
        depth_ms.append(ms_since(t0))
    state.reset_tree()
    sizes = torch.tensor([k] + [k * k] * (len(groups) - 1), device=device)
    parents = torch.cat([cand_parents[0]] + [p.repeat_interleave(k) for p in cand_parents[1:]])
    depths = torch.repeat_interleave(torch.arange(1, len(groups) + 1, device=device), sizes)
    tree = _prune(
        torch.cat(cand_tokens),
        parents,
        depths,
        torch.cat(cand_scores),
        torch.cat(cand_logp),
        torch.repeat_interleave(torch.tensor(groups, device=device), sizes),
        root_feature,
        feature_rows,
        feature_of,
        tree_budget,
    )
    tree.depth_ms = depth_ms
    return tree


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
    n = int(scores.numel())
    keep = min(tree_budget - 1, n)
    key = scores.double() - 1e-9 * depths.double()
    sel = torch.sort(torch.topk(key, keep).indices).values  # creation order: parents before children
    remap = torch.full((n + 1,), -1, dtype=torch.long, device=scores.device)
    remap[sel + 1] = torch.arange(keep, device=scores.device)
    new_parents = remap[parents[sel] + 1]
    h = root_feature.shape[-1]
    node_features = torch.zeros(keep, h, dtype=root_feature.dtype, device=root_feature.device)
    if feature_rows:
        row_of = torch.full((n,), -1, dtype=torch.long, device=scores.device)
        row_of[torch.cat(feature_of)] = torch.arange(sum(int(f.numel()) for f in feature_of), device=scores.device)
        rows = row_of[sel]
        has = rows >= 0
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
