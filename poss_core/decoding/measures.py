"""What a speculative round measures beside decoding: the draft's feature deviation on the accepted path and over
the whole tree, what drafting would have cost at each depth, and the committed tokens and features the deviation
along the target's own continuation reads once the decode ends (continuation.py). None of it changes a token."""

from __future__ import annotations

import torch

from ..models.draft import DraftModel
from ..rounds.events import FeatureDeviation, RoundEvent, TreeDeviation
from .continuation import every_position_deviation
from .tree import DraftTree


def draft_ms_by_depth(tree: DraftTree, draft_ms: float) -> list[float]:
    """What drafting would have cost stopped after each depth: the build's mark at that depth plus what came after
    the last depth (pruning, the decoder's own bookkeeping), which every tree pays whatever its depth."""
    if not tree.depth_ms:
        return []
    tail = max(0.0, draft_ms - tree.depth_ms[-1])
    return [m + tail for m in tree.depth_ms]


def _distances(pred: torch.Tensor, true: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """L2 distance and cosine distance (1 - cos) between rows of predicted and true features."""
    pred, true = pred.float(), true.float().to(pred.device)
    return (pred - true).norm(dim=-1), 1.0 - torch.nn.functional.cosine_similarity(pred, true, dim=-1)


def feature_deviation(tree: DraftTree, path: list[int], hidden: torch.Tensor) -> list[FeatureDeviation]:
    """For accepted position k: the draft's predicted feature at the slot before it vs the target's true feature.
    `hidden` [1 + n_nodes, H] is the target's feature at each slot of the verify pass (0: the root)."""
    if not path or tree.root_feature is None:  # a draft without features (the oracle) has no deviation
        return []
    predicted = [tree.root_feature] + [tree.node_features[a] for a in path[:-1]]  # accept_len x [H]
    true_slots = [0] + [a + 1 for a in path[:-1]]
    l2, cos = _distances(torch.stack(predicted), hidden[torch.tensor(true_slots, device=hidden.device)])
    return [FeatureDeviation(float(a), float(b)) for a, b in zip(l2.tolist(), cos.tolist())]


def tree_deviation(tree: DraftTree, path: list[int], hidden: torch.Tensor) -> list[TreeDeviation]:
    """Every tree slot whose predicted feature drafted a position: the root (position 1) and each node with a
    feature (position depth + 1), against the target's true feature at that slot, averaged by position on the
    accepted path and off it. The path's last accepted slot is the feature behind the rejection that ended it."""
    if tree.root_feature is None:  # a draft without features (the oracle)
        return []
    nodes = torch.nonzero(tree.has_feature).flatten()  # [n_featured]
    pred = torch.cat([tree.root_feature[None], tree.node_features[nodes]])  # [1 + n_featured, H]
    slots = torch.cat([torch.zeros(1, dtype=torch.long), nodes.cpu() + 1])
    l2, cos = _distances(pred, hidden[slots.to(hidden.device)])
    k = torch.cat([torch.ones(1, dtype=torch.long), tree.depths[nodes].cpu() + 1])  # the position each drafted
    on = torch.zeros(len(slots), dtype=torch.bool)
    on[0] = True
    on[1:] = torch.isin(nodes.cpu(), torch.tensor(path, dtype=torch.long))
    out = []
    for pos in sorted(set(k.tolist())):
        for on_path in (True, False):
            sel = (k == pos) & (on == on_path)
            if bool(sel.any()):
                out.append(TreeDeviation(pos, on_path, float(l2[sel].mean()), float(cos[sel].mean()), int(sel.sum())))
    return out


class CommittedTrace:
    """Every committed token, the target's feature of each one it has read, and each round's root position: the
    input of the deviation along the target's own continuation, measured once the decode ends."""

    def __init__(self, ids: torch.Tensor, first: int, prompt_features: torch.Tensor) -> None:
        self.tokens = [ids, torch.tensor([first])]  # the prompt [n_prompt], then each round's committed tokens
        self.features = [prompt_features]  # [n_prompt, H], then each round's [accept_len + 1, H]
        self.roots = [0]  # the position of each round's root (the prefill's: 0)

    def add(self, root_position: int, tokens: torch.Tensor, features: torch.Tensor) -> None:
        """A round's committed tokens (its accepted path and bonus) and the target's features of the slots read."""
        self.roots.append(root_position)
        self.tokens.append(tokens)
        self.features.append(features)

    def drafted_spans(self, events: list[RoundEvent]) -> list[tuple[RoundEvent, tuple[int, int]]]:
        """Each round that drafted, with the positions it covered: from its root up to the next round's root."""
        ends = [*self.roots[1:], sum(len(t) for t in self.tokens)]
        return [(e, (p, end)) for e, p, end in zip(events, self.roots, ends) if not e.prefill and e.nodes]

    def measure(self, drafted: list[tuple[RoundEvent, tuple[int, int]]], draft: DraftModel, depth: int) -> None:
        """The `drafted_spans` rounds' deviation along the target's own continuation, from each round's root and
        from every position it covered (continuation.py), in one batched unroll."""
        tokens, features = torch.cat(self.tokens), torch.cat(self.features)
        from_root, every = every_position_deviation(draft, tokens, features, [span for _, span in drafted], depth)
        for (event, _), root_dev, every_dev in zip(drafted, from_root, every):
            event.continuation_deviation = root_dev
            event.every_position_deviation = every_dev
