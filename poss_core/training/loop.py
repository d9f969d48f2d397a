"""One draft's training loop over one process or many (accelerate): each optimizer step takes one global batch,
every process trains its own share of its rows in micro-batches, and the gradients are averaged by DDP. Checkpoints
are accelerate's state (weights, optimizer, every process's random generators), so a resumed run continues the
uninterrupted one step for step; logs and progress come from the main process alone."""

from __future__ import annotations

import json
import shutil
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ..models.draft import DraftModel
from .distributed import Layout, global_noise
from .features import FeatureFill
from .trainer import DraftLoss, RowBatch, TrainConfig, TrainSequence, lr_at, make_batch, make_optimizer, trainable

PART_KEYS = ("feature", "token", "topk", "acc")  # the loss parts a step logs, in the order the log has always had


@dataclass
class RunContext:
    """What every method's training shares: the accelerator, this process's place, the training rows (global batches
    index into them) and where their features come from."""

    accelerator: Any
    layout: Layout
    seqs: list[TrainSequence]
    fill: FeatureFill
    log_rows: bool = False
    progress: bool = True

    @property
    def main(self) -> bool:
        return bool(self.accelerator.is_main_process)


def share_batch(ctx: RunContext, rows: list[int], share: list[int], noise: torch.Tensor | None) -> RowBatch | None:
    """The padded batch of one micro-batch (`share`: positions in the global batch `rows`), on the training device,
    with its rows' slice of the global batch's noise; None for an empty share."""
    if not share:
        return None
    batch = make_batch(ctx.fill([ctx.seqs[rows[i]] for i in share]))
    if noise is not None:
        picked = noise.index_select(0, torch.tensor(share, device=noise.device))
        batch.input_noise = picked[:, : batch.tokens.shape[1]]
    return batch.to(ctx.accelerator.device)


def part_sums(parts: list[dict[str, float]], rows: int, positions: int) -> torch.Tensor:
    """A micro-batch's logged loss parts as sums over its answer rows [positions, PART_KEYS] (zeros when empty)."""
    sums = torch.zeros(positions, len(PART_KEYS), dtype=torch.float64)
    for j, p in enumerate(parts):
        for k, key in enumerate(PART_KEYS):
            sums[j, k] = p.get(key, 0.0) * rows
    return sums


def global_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    params: list[torch.nn.Parameter],
    rows: list[int],
    cfg: TrainConfig,
    step: int,
    ctx: RunContext,
) -> dict:
    """One AdamW step on the global batch `rows`: this process's micro-batches accumulate their gradients (synced
    across processes on the last one), then the paper's gradient value clipping and the scheduled learning rate.
    Returns the step's log record (loss and parts over the whole global batch)."""
    acc, layout = ctx.accelerator, ctx.layout
    for group in opt.param_groups:
        group["lr"] = lr_at(step, cfg)
    lengths = [int(ctx.seqs[i].input_ids.numel()) for i in rows]
    answer_rows = [ctx.seqs[i].answer_rows for i in rows]
    hidden = int(model_draft(model).config.hidden_size)
    noise = global_noise((len(rows), max(lengths) - 1, hidden), cfg.noise, acc.device)
    denominator = torch.tensor(float(sum(answer_rows)), device=acc.device)
    shares = layout.my_rows(lengths)
    opt.zero_grad(set_to_none=True)
    loss_sum = torch.zeros((), dtype=torch.float64, device=acc.device)
    parts = torch.zeros(cfg.positions, len(PART_KEYS), dtype=torch.float64)
    for k, share in enumerate(shares):
        # Only the last micro-batch all-reduces: the earlier ones accumulate gradients locally.
        with acc.no_sync(model) if k < len(shares) - 1 else nullcontext():
            loss, micro_parts = model(share_batch(ctx, rows, share, noise), cfg, denominator, float(layout.processes))
            acc.backward(loss)
        loss_sum += loss.detach().double()
        parts += part_sums(micro_parts, sum(answer_rows[i] for i in share), cfg.positions)
    torch.nn.utils.clip_grad_value_(params, cfg.grad_clip)  # elementwise, so a sharded gradient clips alike
    opt.step()
    totals = acc.reduce(torch.cat([loss_sum.reshape(1).cpu(), parts.flatten()]).to(acc.device), "sum").cpu()
    means = totals[1:].reshape(parts.shape) / max(1, sum(answer_rows))
    keys = [key for key in PART_KEYS if key != "topk" or cfg.weights.topk > 0]
    return {
        "step": step,
        "loss": float(totals[0]) / layout.processes,
        "lr": lr_at(step, cfg),
        "positions": [{key: float(means[j, PART_KEYS.index(key)]) for key in keys} for j in range(cfg.positions)],
    }


def model_draft(model: torch.nn.Module) -> DraftModel:
    """The draft inside a (possibly DDP-wrapped) `DraftLoss`."""
    return getattr(model, "module", model).draft


def save_checkpoint(accelerator, state_dir: Path, step: int) -> None:
    """accelerate's state after `step` optimizer steps, replacing the previous one only once it is complete."""
    partial = state_dir.with_name(state_dir.name + ".partial")
    if accelerator.is_main_process and partial.exists():
        shutil.rmtree(partial)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(partial))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (partial / "progress.json").write_text(json.dumps({"step": step}))
        if state_dir.exists():
            shutil.rmtree(state_dir)
        partial.rename(state_dir)
    accelerator.wait_for_everyone()


def resume(accelerator, state_dir: Path) -> int:
    """Load the last complete checkpoint, if any; returns the optimizer steps it had taken (0 for a fresh run)."""
    progress = state_dir / "progress.json"
    if not progress.is_file():
        return 0
    accelerator.load_state(str(state_dir))
    return int(json.loads(progress.read_text())["step"])


def train_one(
    name: str, draft: DraftModel, batches, cfg: TrainConfig, out: Path, ctx: RunContext, save_every: int
) -> tuple[DraftModel, dict]:
    """Train one draft from where its last checkpoint left it; returns the trained draft (unwrapped, on the training
    device) and its training record."""
    acc = ctx.accelerator
    run_dir = out / name
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)  # what a fresh run's noise starts from; a resumed run restores its generators
    params = trainable(draft)
    model, opt = acc.prepare(DraftLoss(draft), make_optimizer(params, cfg))
    start = resume(acc, run_dir / "state")
    batches.skip(start)  # the stream is deterministic: pass over what the checkpoint already trained on
    model.train()
    t0 = time.time()
    bar = tqdm(
        range(start, cfg.steps),
        desc=f"train {name}",
        initial=start,
        total=cfg.steps,
        disable=not (ctx.progress and ctx.main),
    )
    tokens = 0
    log = open(run_dir / "loss_log.jsonl", "a") if ctx.main else None
    rows_log = open(run_dir / f"rows-rank{ctx.layout.rank}.jsonl", "a") if ctx.log_rows else None
    try:
        for step in bar:
            rows = next(batches)
            record = global_step(model, opt, params, rows, cfg, step, ctx)
            tokens += sum(int(ctx.seqs[r].input_ids.numel()) for r in rows)
            if rows_log is not None:
                mine = [
                    rows[i] for share in ctx.layout.my_rows([len(ctx.seqs[r].input_ids) for r in rows]) for i in share
                ]
                rows_log.write(json.dumps({"step": step, "rows": sorted(mine)}) + "\n")
            if log is not None:
                log.write(json.dumps(record) + "\n")
            bar.set_postfix(loss=f"{record['loss']:.3f}", acc=f"{record['positions'][0]['acc']:.2f}")
            if (step + 1) % save_every == 0 or step + 1 == cfg.steps:
                for f in (log, rows_log):
                    if f is not None:
                        f.flush()
                save_checkpoint(acc, run_dir / "state", step + 1)
    finally:
        for f in (log, rows_log):
            if f is not None:
                f.close()
    acc.wait_for_everyone()
    trained = acc.unwrap_model(model).draft
    acc.free_memory()  # the next method prepares its own model and optimizer (and checkpoints only those)
    trained.eval()
    seconds = time.time() - t0
    record = {
        "method": name,
        "steps": cfg.steps,
        "seconds_this_run": round(seconds, 1),
        "tokens_per_second": round(tokens / seconds, 1) if tokens else None,  # global-batch tokens, all processes
    }
    if acc.device.type == "cuda":
        record["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated(acc.device) / 1024**3, 2)
    return trained, record
