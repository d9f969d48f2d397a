"""Draft losses: Smooth-L1 on features, soft cross-entropy against the target, and top-K distillation."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LossWeights:
    """Weights of the three terms. The default is the paper's (feature 1.0, soft CE 0.1, top-K 0 in POSS's script)."""

    feature: float = 1.0
    token: float = 0.1
    topk: float = 0.0
    topk_k: int = 10

    @staticmethod
    def named(name: str) -> "LossWeights":
        presets = {
            "paper": LossWeights(),
            "hass": LossWeights(1.0, 0.1, 1.0),  # HASS's second stage adds top-K distillation at 1.0
            "token-heavy": LossWeights(0.2, 0.7, 0.1),  # the token 0.7 / feature 0.2 / top-K 0.1 weighting
        }
        if name not in presets:
            raise ValueError(f"loss weighting {name!r} is unknown: use one of {', '.join(presets)}.")
        return presets[name]


def masked_mean(values: torch.Tensor, mask: torch.Tensor, denominator: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of per-row values [B, T] over rows where mask [B, T] is 1; with `denominator`, their sum divided by it
    (the rows of a whole global batch, of which these are a share)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / (mask.sum().clamp(min=1.0) if denominator is None else denominator)


def draft_loss(
    pred: torch.Tensor,
    target_feat: torch.Tensor,
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor,
    mask: torch.Tensor,
    weights: LossWeights,
    denominator: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """pred/target_feat [B, T, H]; target_logits/draft_logits [B, T, Vd] over the draft vocabulary; mask [B, T].
    `denominator` (see `masked_mean`) divides the loss terms; the logged parts stay these rows' own means."""
    feat = F.smooth_l1_loss(pred.float(), target_feat.float(), reduction="none").mean(-1)
    target_p = torch.softmax(target_logits.float(), dim=-1)
    log_q = torch.log_softmax(draft_logits.float(), dim=-1)
    token = -(target_p * log_q).sum(-1)
    loss = weights.feature * masked_mean(feat, mask, denominator) + weights.token * masked_mean(
        token, mask, denominator
    )
    parts = {"feature": float(masked_mean(feat, mask).detach()), "token": float(masked_mean(token, mask).detach())}
    if weights.topk > 0:
        top_p, top_i = torch.topk(target_p, weights.topk_k, dim=-1)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        topk = -(top_p * log_q.gather(-1, top_i)).sum(-1)
        loss = loss + weights.topk * masked_mean(topk, mask, denominator)
        parts["topk"] = float(masked_mean(topk, mask).detach())
    with torch.no_grad():
        hit = (draft_logits.argmax(-1) == target_logits.argmax(-1)).float()
        parts["acc"] = float(masked_mean(hit, mask))
    return loss, parts
