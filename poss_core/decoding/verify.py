"""Verification: greedy (longest path matching the target's argmax) and lossless sampling (recursive rejection)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from .tree import DraftTree


class SlotRows:
    """The target's rows (logits or probabilities) for a tree's slots, computed only where verification reads them.

    Verification reads the row of every slot that has children (to test them) and the row of the slot where
    acceptance stops (for the bonus token). The first are computed up front in one batched LM-head call; a leaf's row
    only if acceptance ends there. Over a 49k vocabulary the LM head is a fifth of a small target's weights, so
    applying it to every slot of a tree costs a CPU verify pass roughly a tenth more (the README measures it).
    Indexing by slot (0 = root, i+1 = node i) works like indexing a full [slots, V] tensor. `every_slot` puts every
    slot through the head in the one call instead (`DecodeConfig.head_rows="all"`). `lazy_ms` is the time the leaf's
    call took: target work that the decoder counts as verification, not as its own overhead."""

    def __init__(
        self,
        rows_of: Callable[[torch.Tensor], torch.Tensor],
        hidden: torch.Tensor,
        parents: torch.Tensor,
        every_slot: bool = False,
    ) -> None:
        self._rows_of = rows_of
        self._hidden = hidden
        if every_slot:
            self.slots, self.where = torch.arange(int(hidden.shape[0])), parents + 1
        else:
            self.slots, self.where = torch.unique(parents + 1, return_inverse=True)  # slots with children; node -> row
        self.block = rows_of(hidden[self.slots.to(hidden.device)])
        self._index = {s: i for i, s in enumerate(self.slots.tolist())}
        self._more: dict[int, torch.Tensor] = {}
        self.lazy_ms = 0.0

    def __getitem__(self, slot: int) -> torch.Tensor:
        i = self._index.get(slot)
        if i is not None:
            return self.block[i]
        if slot not in self._more:
            t0 = time.perf_counter()
            self._more[slot] = self._rows_of(self._hidden[slot : slot + 1])[0]
            self.lazy_ms += (time.perf_counter() - t0) * 1000.0
        return self._more[slot]

    @property
    def computed(self) -> int:
        """How many slots' rows were computed (the LM head's work this round)."""
        return len(self._index) + len(self._more)

    def log_norms(self) -> torch.Tensor:
        """logsumexp of each node's parent row (its entry in `at_nodes` minus this is the log-probability): computed
        over the parents' rows only, not over every row the block holds."""
        parents, where = torch.unique(self.where, return_inverse=True)
        if parents.numel() == self.block.shape[0]:  # the block holds only parents' rows ("read"): no copy
            return _logsumexp_rows(self.block)[self.where]
        return _logsumexp_rows(self.block[parents])[where]

    def at_nodes(self, tokens: torch.Tensor) -> torch.Tensor:
        """Each node's entry in its parent's row: the target's logit (or probability) of the drafted token."""
        return self.block[self.where, tokens]


def _logsumexp_rows(rows: torch.Tensor) -> torch.Tensor:
    """`torch.logsumexp(rows, dim=-1)` for finite rows of logits with one temporary instead of two (the rows are
    49k wide, so each temporary is megabytes written and read once per round)."""
    top = rows.amax(dim=-1, keepdim=True)
    return (rows - top).exp_().sum(dim=-1).log_() + top[:, 0]


def target_distribution(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The distribution the target samples from: softmax(logits / T), restricted to the top-p nucleus.

    At temperature 0 this is softmax(logits): greedy decoding takes its argmax, and views show its probabilities."""
    logits = logits.float()
    if temperature > 0:
        logits = logits / temperature
    probs = torch.softmax(logits, dim=-1)
    if temperature > 0 and top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the token that crosses it is kept).
        drop_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def verify_greedy(tree: DraftTree, logits: torch.Tensor | SlotRows) -> tuple[list[int], int]:
    """Accept down the tree while the drafted token is the target's argmax at its parent; return (path, bonus).

    `logits[slot]` is the target's row at a slot: the root is slot 0, node i is slot i + 1."""
    tokens = tree.tokens.tolist()
    kids = tree.children()
    path: list[int] = []
    slot = 0
    while True:
        # max(dim) returns the first maximal index, as argmax does (plain decoding's choice), at a third of the cost
        best = int(torch.max(logits[slot], dim=-1).indices)
        nxt = next((c for c in kids[slot] if tokens[c] == best), None)
        if nxt is None:
            return path, best
        path.append(nxt)
        slot = nxt + 1


def verify_sampling(
    tree: DraftTree, probs: torch.Tensor | SlotRows, generator: torch.Generator
) -> tuple[list[int], int]:
    """Lossless multi-candidate verification. At each slot, try its children best-first: accept child x with
    probability p(x) under the residual distribution (the draft proposes deterministically, q = 1), else remove x
    from p and renormalise. The accepted path followed by the bonus token is distributed exactly as the target's own
    samples."""
    tokens = tree.tokens.tolist()
    kids = tree.children()
    path: list[int] = []
    slot = 0
    while True:
        p = probs[slot].clone()
        accepted = None
        for child in kids[slot]:
            x = tokens[child]
            px = float(p[x])
            if px <= 0.0:
                continue
            if float(torch.rand((), generator=generator)) < px:
                accepted = child
                break
            p[x] = 0.0
            total = float(p.sum())
            if total <= 0.0:  # only reachable through rounding: fall back to the target's full distribution
                p = probs[slot].clone()
                break
            p /= total
        if accepted is None:
            return path, int(torch.multinomial(p, 1, generator=generator))
        path.append(accepted)
        slot = accepted + 1
