"""Feature deviation along the target's own continuation: for each round, the draft rolled forward from the round's
root over the tokens the target then committed, on its own predicted features, as decoding would draft that chain;
each position's predicted feature is compared with the target's true feature for the same token.

Measured only on accepted tree positions, deviation is survivor-biased (the feature that caused a rejection is never
counted, and deep positions average only the easiest rounds). Along the continuation every round counts at every
position the committed text reaches, whatever the draft proposed. It needs draft passes only: the target's features
of the committed tokens were computed by verification and kept.

Round roots are not a sample of the text: a round starts right after the previous draft failed. So chains also start
from every position of the continuation (`every_position_deviation`), the curve the paper draws; the round-root one
stays, named for what it is."""

from __future__ import annotations

import torch

from ..models.draft import DraftModel
from ..models.target import float_mask
from ..rounds.events import FeatureDeviation, StartDeviation


def chain_mask(rows: int, anchors: torch.Tensor, blocks: int) -> torch.Tensor:
    """Bool visibility over `rows` context rows followed by `blocks - 1` chain blocks of len(anchors) rows each
    (chain block i, 2-based, holds step i of the chain anchored at each anchor). A context row sees the context
    causally; a chain row sees the context up to its anchor and its own chain's earlier steps (and itself)."""
    a = len(anchors)
    n = rows + (blocks - 1) * a
    allowed = torch.zeros(n, n, dtype=torch.bool, device=anchors.device)
    allowed[:rows, :rows] = torch.ones(rows, rows, dtype=torch.bool, device=anchors.device).tril()
    if blocks > 1:
        ctx = torch.arange(rows, device=anchors.device)[None, :] <= anchors[:, None]  # [a, rows]
        same = torch.eye(a, dtype=torch.bool, device=anchors.device)
        for i in range(blocks - 1):
            q = slice(rows + i * a, rows + (i + 1) * a)
            allowed[q, :rows] = ctx
            for j in range(i + 1):
                allowed[q, rows + j * a : rows + (j + 1) * a] = same
    return allowed


@torch.inference_mode()
def unroll_chains(
    draft: DraftModel, tokens: torch.Tensor, features: torch.Tensor, anchors: torch.Tensor, steps: int
) -> list[torch.Tensor]:
    """The draft's predicted features of `steps` chained positions from each anchor row.

    Row j of the sequence pairs token `tokens[j + 1]` with the target feature `features[j]` and predicts
    `features[j + 1]`. The chain anchored at row t0 (the last row with a true feature: a round's root is token
    t0 + 1) predicts at step k the feature of row t0 + k - 1 + 1, reading the target's true features up to t0 and
    its own predictions after it, with specialist `specialist_of(k)`, as the decoding tree does. Anchors whose step
    k would pass the last row are left out of step k. Returns per step k a tensor [len(anchors), H] (rows of
    anchors beyond the sequence hold predictions nothing compares)."""
    rows = int(features.shape[0])
    row_tokens = tokens[1 : rows + 1]
    positions = torch.arange(rows, device=features.device)
    out: list[torch.Tensor] = []
    for k in range(1, steps + 1):
        group = draft.specialist_of(k)
        tok, feat, pos = [row_tokens], [features], [positions]
        for i in range(2, k + 1):
            # Block i row of anchor a: token of row a + i - 1, at that position, on step i - 1's prediction.
            r = (anchors + i - 1).clamp(max=rows - 1)
            tok.append(row_tokens[r])
            feat.append(out[i - 2])
            pos.append(anchors + i - 1)
        allowed = chain_mask(rows, anchors, k)
        x = draft.run_specialist(
            group,
            torch.cat(tok)[None],
            torch.cat(feat)[None],
            torch.cat(pos)[None],
            float_mask(allowed, features.dtype),
        )[0]
        out.append(x[anchors] if k == 1 else x[rows + (k - 2) * len(anchors) :])
    return out


# Chains rolled forward in one pass: the mask grows with (chains x depth)^2, so long answers go in slices of this many.
ANCHORS_PER_PASS = 256


def start_deviations(
    draft: DraftModel, tokens: torch.Tensor, features: torch.Tensor, starts: list[int], steps: int
) -> dict[int, list[FeatureDeviation]]:
    """For each start position p (the chain's first token is `tokens[p]`): the deviation at positions 1..m between
    the draft's chained prediction and the target's feature of the same token, m = min(steps, positions the
    committed text reaches). `tokens` are the committed ids [L]; `features` the target's features of the tokens it
    read [F <= L] (row j of `features` is the feature at token j). Starts with nothing to compare are left out."""
    rows = int(features.shape[0]) - 1  # rows with a known next feature to compare with
    usable = sorted({p for p in starts if 1 <= p <= rows})
    if not usable or steps < 1:
        return {}
    w = draft.fc.weight
    feats = features.to(device=w.device, dtype=w.dtype)
    ids = tokens.to(w.device)
    found: dict[int, list[FeatureDeviation]] = {}
    for i in range(0, len(usable), ANCHORS_PER_PASS):
        chunk = usable[i : i + ANCHORS_PER_PASS]
        anchors = torch.tensor([p - 1 for p in chunk], device=w.device)
        reach = min(steps, rows - chunk[0] + 1)
        preds = unroll_chains(draft, ids, feats[:rows], anchors, reach)
        for idx, p in enumerate(chunk):
            m = min(reach, rows - p + 1)  # step k compares the feature of token p + k - 1
            pred = torch.stack([preds[k][idx] for k in range(m)]).float()
            true = feats[p : p + m].float()
            l2 = (pred - true).norm(dim=-1)
            cos = 1.0 - torch.nn.functional.cosine_similarity(pred, true, dim=-1)
            found[p] = [FeatureDeviation(float(a), float(b)) for a, b in zip(l2.tolist(), cos.tolist())]
    return found


def continuation_deviation(
    draft: DraftModel, tokens: torch.Tensor, features: torch.Tensor, roots: list[int], steps: int
) -> list[list[FeatureDeviation]]:
    """For each round's root position p (the root token is `tokens[p]`), `start_deviations` from p alone."""
    found = start_deviations(draft, tokens, features, roots, steps)
    return [found.get(p, []) for p in roots]


def mean_by_position(chains: list[list[FeatureDeviation]]) -> list[StartDeviation]:
    """Several chains' deviations averaged position by position, each position with the chains that reached it."""
    out: list[StartDeviation] = []
    for k in range(1, max((len(c) for c in chains), default=0) + 1):
        at = [c[k - 1] for c in chains if len(c) >= k]
        out.append(StartDeviation(k, sum(d.l2 for d in at) / len(at), sum(d.cosine for d in at) / len(at), len(at)))
    return out


def every_position_deviation(
    draft: DraftModel, tokens: torch.Tensor, features: torch.Tensor, spans: list[tuple[int, int]], steps: int
) -> tuple[list[list[FeatureDeviation]], list[list[StartDeviation]]]:
    """Chains from every position of the continuation in one batched unroll: for each round's span [root, end) of
    positions (its root and the tokens it accepted), the chain from its root alone (the round-root measure) and the
    mean over the chains from every position of the span (the every-position measure)."""
    found = start_deviations(draft, tokens, features, [p for a, b in spans for p in range(a, b)], steps)
    from_root = [found.get(a, []) for a, _ in spans]
    every = [mean_by_position([found[p] for p in range(a, b) if p in found]) for a, b in spans]
    return from_root, every
