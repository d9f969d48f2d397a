"""Verification: greedy (longest path matching the target's argmax) and lossless sampling (recursive rejection)."""

from __future__ import annotations

import torch

from .tree import DraftTree


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


def verify_greedy(tree: DraftTree, logits: torch.Tensor) -> tuple[list[int], int]:
    """Accept down the tree while the drafted token is the target's argmax at its parent; return (path, bonus).

    `logits` has one row per slot: the root first, then the nodes in tree order."""
    best = logits.argmax(dim=-1).tolist()
    tokens = tree.tokens.tolist()
    kids = tree.children()
    path: list[int] = []
    slot = 0
    while True:
        nxt = next((c for c in kids[slot] if tokens[c] == best[slot]), None)
        if nxt is None:
            return path, best[slot]
        path.append(nxt)
        slot = nxt + 1


def verify_sampling(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> tuple[list[int], int]:
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
