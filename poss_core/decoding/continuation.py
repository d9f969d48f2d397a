"""Feature deviation along the target's own continuation: for each round, the draft rolled forward from the round's
root over the tokens the target then committed, on its own predicted features, as decoding would draft that chain;
each position's predicted feature is compared with the target's true feature for the same token.

Measured only on accepted tree positions, deviation is survivor-biased (the feature that caused a rejection is never
counted, and deep positions average only the easiest rounds). Along the continuation every round counts at every
position the committed text reaches, whatever the draft proposed. It needs draft passes only: the target's features
of the committed tokens were computed by verification and kept."""

from __future__ import annotations

import torch

from ..events import FeatureDeviation
from ..models.draft import DraftModel
from ..models.target import float_mask


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


def continuation_deviation(
    draft: DraftModel, tokens: torch.Tensor, features: torch.Tensor, roots: list[int], steps: int
) -> list[list[FeatureDeviation]]:
    """For each round's root position p (the root token is `tokens[p]`): the deviation at positions 1..m between
    the draft's chained prediction and the target's feature of the same token, m = min(steps, positions the
    committed text reaches). `tokens` are the committed ids [L]; `features` the target's features of the tokens it
    read [F <= L] (row j of `features` is the feature at token j)."""
    rows = int(features.shape[0]) - 1  # rows with a known next feature to compare with
    usable = [p for p in roots if 1 <= p <= rows]
    if not usable or steps < 1:
        return [[] for _ in roots]
    w = draft.fc.weight
    feats = features.to(device=w.device, dtype=w.dtype)
    anchors = torch.tensor([p - 1 for p in usable], device=w.device)
    reach = min(steps, rows - min(usable) + 1)
    preds = unroll_chains(draft, tokens.to(w.device), feats[:rows], anchors, reach)
    by_root: dict[int, list[FeatureDeviation]] = {}
    for idx, p in enumerate(usable):
        m = min(reach, rows - p + 1)  # step k compares the feature of token p + k - 1
        pred = torch.stack([preds[k][idx] for k in range(m)]).float()
        true = feats[p : p + m].float()
        l2 = (pred - true).norm(dim=-1)
        cos = 1.0 - torch.nn.functional.cosine_similarity(pred, true, dim=-1)
        by_root[p] = [FeatureDeviation(float(a), float(b)) for a, b in zip(l2.tolist(), cos.tolist())]
    return [by_root.get(p, []) for p in roots]
