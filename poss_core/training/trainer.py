"""Training loop for drafts: teacher forcing (EAGLE, matched control) and unrolled position steps (POSS)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from ..models.draft import DraftModel
from ..models.target import float_mask
from .losses import LossWeights, draft_loss


@dataclass
class TrainSequence:
    """One training sequence: token ids [T], the target's features [T, H] (after the final norm; None until computed,
    for a tokens-only data folder), loss mask [T]."""

    input_ids: torch.Tensor
    hidden: torch.Tensor | None
    loss_mask: torch.Tensor
    origin: tuple[str, int, int] | None = None  # (shard file, first, end) of stored features read on demand

    @property
    def answer_rows(self) -> int:
        """Rows this sequence adds to the loss (row j predicts token j+1, so the first token is never one)."""
        return int(self.loss_mask[1:].sum())


@dataclass
class RowBatch:
    """Draft rows of a padded batch: row j reads (token x[j+1], feature f[j]) and should predict f[j+1]."""

    tokens: torch.Tensor  # [B, T-1]
    features: torch.Tensor  # [B, T-1, H]
    target_features: torch.Tensor  # [B, T-1, H]
    mask: torch.Tensor  # [B, T-1] 1 where position j+1 is an answer token
    # EAGLE's uniform input noise [B, T-1, H], drawn for the whole global batch and sliced to these rows, so a row's
    # noise does not depend on how the batch was split over processes (None: `noisy` draws it here).
    input_noise: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> "RowBatch":
        """The batch on `device` (the training device accelerate picked)."""
        moved = [None if t is None else t.to(device) for t in (self.features, self.target_features, self.input_noise)]
        return RowBatch(self.tokens.to(device), moved[0], moved[1], self.mask.to(device), moved[2])

    @property
    def positions(self) -> torch.Tensor:
        b, t = self.tokens.shape
        return torch.arange(t, device=self.tokens.device).expand(b, t)


def make_batch(seqs: Sequence[TrainSequence], dtype: torch.dtype = torch.float32) -> RowBatch:
    """Pad sequences on the right and pair tokens with features (reference section 5)."""
    t = max(int(s.input_ids.numel()) for s in seqs) - 1
    h = seqs[0].hidden.shape[-1]
    tokens = torch.zeros(len(seqs), t, dtype=torch.long)
    feats = torch.zeros(len(seqs), t, h, dtype=dtype)
    target = torch.zeros(len(seqs), t, h, dtype=dtype)
    mask = torch.zeros(len(seqs), t)
    for i, s in enumerate(seqs):
        n = int(s.input_ids.numel()) - 1
        tokens[i, :n] = s.input_ids[1:]
        feats[i, :n] = s.hidden[:-1].to(dtype)
        target[i, :n] = s.hidden[1:].to(dtype)
        mask[i, :n] = s.loss_mask[1:].float()
    return RowBatch(tokens, feats, target, mask)


def shift_predictions(first: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """Next step's input features: row r reads the prediction made at row r-1 (row 0 keeps the true feature).
    Detached: each step learns to correct the error it is given, not to change the previous step."""
    return torch.cat([first[:, :1], pred[:, :-1].detach()], dim=1)


def noisy(features: torch.Tensor, noise: float) -> torch.Tensor:
    """EAGLE's uniform input noise (half-width `noise`): robustness to the error of the draft's own features."""
    if noise <= 0:
        return features
    return features + (torch.rand_like(features) - 0.5) * 2 * noise


def input_features(batch: RowBatch, noise: float) -> torch.Tensor:
    """The first step's input features: the target's, plus the batch's own noise where it carries one."""
    if batch.input_noise is not None:
        return batch.features + batch.input_noise
    return noisy(batch.features, noise)


def unroll(draft: DraftModel, batch: RowBatch, steps: int, noise: float = 0.0) -> list[tuple[int, torch.Tensor]]:
    """Run `steps` simulated draft positions; step j uses specialist_of(j+1) and reads step j-1's predictions.
    Returns [(specialist, predicted features [B, T, H])] per step."""
    t = batch.tokens.shape[1]
    causal = float_mask(torch.ones(t, t, dtype=torch.bool, device=batch.tokens.device).tril(), batch.features.dtype)
    feats = input_features(batch, noise)
    out = []
    for j in range(steps):
        group = draft.specialist_of(j + 1)
        pred = draft.run_specialist(group, batch.tokens, feats, batch.positions, causal)
        out.append((group, pred))
        feats = shift_predictions(batch.features, pred)
    return out


def decoding_mask(steps: int, t: int, device=None) -> torch.Tensor:
    """Which rows of `steps` stacked blocks of t rows each may attend to which, as in decoding. Block i (1-based)
    row r holds step i of the draft chain anchored at t0 = r - i + 1 (the last row with a true feature). It sees
    the true context (block 1, rows <= t0) and its own chain's earlier steps (block k <= i, row t0 + k - 1).
    Returns bool [steps*t, steps*t]."""
    block = torch.arange(steps, device=device).repeat_interleave(t)  # 0-based block of every stacked row
    row = torch.arange(t, device=device).repeat(steps)
    anchor = row - block
    q_anchor, k_anchor = anchor[:, None], anchor[None, :]
    q_block, k_block = block[:, None], block[None, :]
    context = (k_block == 0) & (row[None, :] <= q_anchor)
    chain = (k_block >= 1) & (k_block <= q_block) & (k_anchor == q_anchor)
    return context | chain


def decoding_unroll(
    draft: DraftModel, batch: RowBatch, steps: int, noise: float = 0.0
) -> list[tuple[int, torch.Tensor]]:
    """Like `unroll`, but every step sees what it sees in decoding: the target's true features up to the chain's
    anchor and the draft's own predictions only after it (`unroll` makes every context feature a prediction). HASS's
    context alignment trains this way. Step j re-runs its specialist over the true rows and the earlier steps' rows
    (detached predictions), as a decoding specialist reads the context and the tree rows before it. Step j costs
    about j times a step of `unroll` (its attention j^2 times)."""
    t = batch.tokens.shape[1]
    true_feats = input_features(batch, noise)
    out: list[tuple[int, torch.Tensor]] = []
    preds: list[torch.Tensor] = []
    for j in range(1, steps + 1):
        group = draft.specialist_of(j)
        feats = [true_feats]
        for i in range(2, j + 1):
            # Block i row r belongs to anchor r - i + 1, whose step-(i-1) prediction sits at row r - 1 of block i-1.
            prev = preds[i - 2].detach()
            feats.append(torch.cat([torch.zeros_like(prev[:, :1]), prev[:, :-1]], dim=1))
        allowed = decoding_mask(j, t, batch.tokens.device)
        x = draft.run_specialist(
            group,
            batch.tokens.repeat(1, j),
            torch.cat(feats, dim=1),
            batch.positions.repeat(1, j),
            float_mask(allowed, batch.features.dtype),
        )
        pred = x[:, (j - 1) * t :]
        preds.append(pred)
        out.append((group, pred))
    return out


# How later simulated positions see their context (TrainConfig.unroll, the evaluation's --unroll).
UNROLLS = {"predicted": unroll, "decoding": decoding_unroll}


@dataclass
class TrainConfig:
    steps: int = 200
    lr: float = 3e-4
    warmup_frac: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.0
    grad_clip: float = 0.5
    noise: float = 0.0
    positions: int = 1  # simulated draft positions per step: 1 = teacher forcing (EAGLE), depth for POSS
    unroll: str = "predicted"  # "predicted": every context feature a prediction; "decoding": as decoding sees it
    weights: LossWeights = field(default_factory=LossWeights)
    seed: int = 0
    autocast: str = "none"  # "bfloat16": mixed precision (fp32 master weights); faster on CPUs with AMX


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to 10%."""
    warm = max(1, int(cfg.steps * cfg.warmup_frac))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    progress = (step - warm) / max(1, cfg.steps - warm)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def loss_on_batch(
    draft: DraftModel,
    batch: RowBatch,
    cfg: TrainConfig,
    denominator: torch.Tensor | None = None,
    scale: float = 1.0,
) -> tuple[torch.Tensor, list[dict[str, float]]]:
    """Summed loss over the simulated positions, and the parts of each position's loss.

    Only answer rows carry a loss, so the LM head and the losses run on those rows alone (the draft layers still
    see every row, as attention context); this roughly halves the cost of the head on chat data. A batch that is one
    share of a global batch passes the global batch's answer rows as `denominator` and the number of processes as
    `scale`: DDP averages the processes' gradients, so the result is the global batch's mean over its rows."""
    device = batch.tokens.device.type
    enabled = cfg.autocast != "none"
    dtype = getattr(torch, cfg.autocast) if enabled else None
    with torch.autocast(device, dtype=dtype, enabled=enabled):
        sel = batch.mask.bool()
        target_feat = batch.target_features[sel]
        target_logits = draft.head_logits(target_feat).detach()
        ones = torch.ones(target_feat.shape[0], device=target_feat.device)
        total = torch.zeros((), dtype=torch.float32, device=target_feat.device)
        parts = []
        for _, pred in UNROLLS[cfg.unroll](draft, batch, cfg.positions, cfg.noise):
            rows = pred[sel]
            loss, p = draft_loss(
                rows, target_feat, target_logits, draft.head_logits(rows), ones, cfg.weights, denominator
            )
            total = total + loss
            parts.append(p)
    return (total * scale if scale != 1.0 else total), parts


def trainable(draft: DraftModel) -> list[nn.Parameter]:
    return [p for p in draft.parameters() if p.requires_grad]


class DraftLoss(nn.Module):
    """The draft with its training loss as the module's forward: DDP synchronises gradients and accelerate applies
    mixed precision through a module's forward, which the draft's own methods (`run_specialist`, `head_logits`)
    are not."""

    def __init__(self, draft: DraftModel) -> None:
        super().__init__()
        self.draft = draft

    def forward(
        self, batch: RowBatch | None, cfg: TrainConfig, denominator: torch.Tensor, scale: float
    ) -> tuple[torch.Tensor, list[dict[str, float]]]:
        if batch is None:
            # A process whose share of a global batch is empty still joins the gradient all-reduce, with a zero loss
            # that reaches every trainable parameter.
            return sum(p.sum() for p in trainable(self.draft)) * 0.0, []
        return loss_on_batch(self.draft, batch, cfg, denominator, scale)


def optimizer_step(
    draft: DraftModel,
    opt: torch.optim.Optimizer,
    params: list[nn.Parameter],
    batch: RowBatch,
    cfg: TrainConfig,
    step: int,
) -> dict:
    """One AdamW step at the scheduled learning rate, with gradient value clipping; returns the step's log record."""
    for group in opt.param_groups:
        group["lr"] = lr_at(step, cfg)
    loss, parts = loss_on_batch(draft, batch, cfg)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_value_(params, cfg.grad_clip)
    opt.step()
    return {"step": step, "loss": float(loss.detach()), "lr": lr_at(step, cfg), "positions": parts}


def make_optimizer(params: list[nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


def train(draft: DraftModel, batches: Iterator[RowBatch], cfg: TrainConfig, log=None) -> list[dict]:
    """AdamW with warm-up and gradient value clipping; returns the loss log (one dict per step)."""
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    params = trainable(draft)
    opt = make_optimizer(params, cfg)
    draft.train()
    history = []
    for step in range(cfg.steps):
        record = optimizer_step(draft, opt, params, next(batches), cfg, step)
        history.append(record)
        if log is not None:
            log(record)
    draft.eval()
    return history
