"""Building a data folder's shards, resumably and split over processes: the target answers prompts (self-distillation),
or only its features are computed, over fixed dataset answers or saved token ids, or none (tokens only)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..decoding.decoder import encode_prompt
from ..models.target import TargetModel
from .features import features_batch
from .shards import TokenShard, shard_path, shard_plan, tokens_path, write_shard


# ----- the target's answers -------------------------------------------------------------------------------------------
@dataclass
class DataConfig:
    """How a folder's answers are written: their length, the prompt's, the batch, sampling and the seed."""

    max_new_tokens: int = 192
    max_prompt_tokens: int = 256
    batch_size: int = 16
    temperature: float = 0.0
    seed: int = 0
    max_shards: int = 0  # 0 = every planned shard; N = only the first N (a folder that was cut short)


@torch.inference_mode()
def answer_batch(
    target: TargetModel, prompt_ids: list[list[int]], cfg: DataConfig
) -> list[tuple[list[int], int, torch.Tensor]]:
    """Batched generation (left padding). Returns, per prompt, (prompt + answer ids up to and including EOS, prompt
    length, the target's last hidden states for those ids). The features come from the generation itself (the last
    hidden state is after the final norm), which saves a second forward over every sequence."""
    pad = target.tokenizer.pad_token_id
    pad = pad if pad is not None else min(target.eos_ids or {0})
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompt_ids):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    kwargs = dict(
        do_sample=cfg.temperature > 0,
        max_new_tokens=cfg.max_new_tokens,
        pad_token_id=pad,
        output_hidden_states=True,
        return_dict_in_generate=True,
    )
    if cfg.temperature > 0:
        kwargs["temperature"] = cfg.temperature
    out = target.model.generate(ids.to(target.device), attention_mask=mask.to(target.device), **kwargs)
    # hidden_states: one tuple per generation step (the first covers the prompt), each with every layer's output.
    last = torch.cat([step[-1] for step in out.hidden_states], dim=1).cpu()  # [B, width + new - 1, H]
    seqs = out.sequences.cpu()
    results = []
    for i, p in enumerate(prompt_ids):
        answer = seqs[i, width:].tolist()
        for j, t in enumerate(answer):
            if t in target.eos_ids:
                answer = answer[: j + 1]
                break
        full = list(p) + answer
        feats = last[i, width - len(p) : width - len(p) + len(full)]
        # The batch's very last token was never fed back, so it has no feature: drop it (one training row less).
        full = full[: feats.shape[0]]
        results.append((full, len(p), feats))
    return results


# ----- several processes ---------------------------------------------------------------------------------------------
def process_state():
    """accelerate's view of the processes this command runs in: one, or those torchrun / accelerate launch started
    (on the CPU only when told `cpu`, or accelerate would not join them)."""
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def my_shards(todo: list[int], state) -> list[int]:
    """This process's part of the shards still to build (accelerate's `split_between_processes`: contiguous
    parts). A shard is one planned batch written under its own index, so any split writes the same files."""
    if state is None or state.num_processes == 1:
        return todo
    with state.split_between_processes(todo) as mine:
        return list(mine)


SUMMED = ("built_now", "from_saved_tokens", "answer_tokens_now", "tokens_now")


def merge_processes(info: dict, state) -> dict:
    """The data card's figures over every process: counts summed, the slowest process's seconds, and how many shards
    each process built."""
    if state is None or state.num_processes == 1:
        return info
    from accelerate.utils import gather_object

    every = gather_object([info])
    merged = {**info, **{k: sum(i[k] for i in every) for k in SUMMED if k in info}}
    merged["seconds_now"] = max(i["seconds_now"] for i in every)
    return {**merged, "processes": state.num_processes, "shards_by_process": [i["built_now"] for i in every]}


def planned_shards(out: Path, lengths: list[int], cfg: DataConfig, state) -> tuple[list[list[int]], list[int]]:
    """The folder's planned batches of prompts (the first --max-shards of them), and this process's part of those
    that have no shard in `out` yet."""
    plan = shard_plan(lengths, cfg.batch_size, cfg.seed)[: cfg.max_shards or None]
    return plan, my_shards([i for i in range(len(plan)) if not shard_path(out, i).exists()], state)


def finish_card(out: Path, info: dict, target_name: str, state) -> dict:
    """Merge every process's figures and write the data card from the main process."""
    info = merge_processes(info, state)
    if state is None or state.is_main_process:
        write_data_card(out, info, target_name)
    return info


def write_data_card(out: Path, info: dict, target_name: str) -> None:
    """Record how the folder was built. A rerun that built nothing (every shard already there) keeps the card of the
    run that did, so checking a finished folder never erases its build figures."""
    card = out / "data_card.json"
    if info["built_now"] == 0 and card.is_file():
        return
    card.write_text(json.dumps({**info, "target": target_name}, indent=2))


# ----- the builds -----------------------------------------------------------------------------------------------------
def build_from_ids(
    target: TargetModel | None, shards: list[TokenShard], out: Path, progress: bool = True, state=None
) -> dict:
    """The feature shards of saved token ids: only the target's forward runs, nothing is generated. Resumable, and
    split over the processes of `state`. Without a target, the shards hold tokens only (no forward at all; see
    `--tokens-only`)."""
    out.mkdir(parents=True, exist_ok=True)
    missing = [i for i, s in enumerate(shards) if not shard_path(out, s.index).exists()]
    todo = [shards[i] for i in my_shards(missing, state)]
    t0, tokens = time.time(), 0
    bar = tqdm(todo, desc=f"{'features' if target else 'tokens'} {out.name}", unit="batch", disable=not progress)
    for s in bar:
        write_shard(
            shard_path(out, s.index),
            s.input_ids,
            s.prompt_lens,
            features_batch(target, s.input_ids) if target else None,
        )
        tokens += sum(len(q) for q in s.input_ids)
        bar.set_postfix(tok_s=f"{tokens / max(time.time() - t0, 1e-9):.0f}")
    info = {
        "shards": len(shards),
        "built_now": len(todo),
        "from_saved_tokens": len(todo),
        "tokens_now": tokens,
        "seconds_now": round(time.time() - t0, 1),
        "features": target is not None,
    }
    return finish_card(out, info, target.name if target else "none (tokens only)", state)


def build(
    target: TargetModel, prompts: list[str], out: Path, cfg: DataConfig, progress: bool = True, state=None
) -> dict:
    """Generate answers and features for every planned batch that has no shard yet, split over the processes of
    `state`. Sampling is seeded per batch, so a batch's answers do not depend on which process made them, nor on
    whether the run was resumed.

    The generated token ids of each batch are also kept in `out/tokens/` (small: commit or copy them). Generation is
    the expensive part; on a fresh machine with only those files, a rerun rebuilds the feature shards from them
    without generating again."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokens").mkdir(exist_ok=True)
    torch.manual_seed(cfg.seed)
    encoded = [encode_prompt(target.tokenizer, p)[-cfg.max_prompt_tokens :] for p in prompts]
    plan, todo = planned_shards(out, [len(e) for e in encoded], cfg, state)
    t0, tokens, reused = time.time(), 0, 0
    bar = tqdm(todo, desc="self-distillation", unit="batch", disable=not progress)
    for i in bar:
        torch.manual_seed(cfg.seed * 100_003 + i)
        saved = tokens_path(out, i)
        if saved.is_file():  # generated earlier (maybe on another machine): only the features are missing
            rows = json.loads(saved.read_text())
            seqs, prompt_lens = rows["input_ids"], rows["prompt_lens"]
            hidden = features_batch(target, seqs)
            reused += 1
        else:
            answered = answer_batch(target, [encoded[j] for j in plan[i]], cfg)
            seqs, prompt_lens, hidden = (
                [s for s, _, _ in answered],
                [p for _, p, _ in answered],
                [h for _, _, h in answered],
            )
            tmp = saved.with_suffix(".partial")
            tmp.write_text(json.dumps({"input_ids": seqs, "prompt_lens": prompt_lens}))
            tmp.replace(saved)
        write_shard(shard_path(out, i), seqs, prompt_lens, hidden)
        tokens += sum(len(q) - pl for q, pl in zip(seqs, prompt_lens))
        bar.set_postfix(answer_tok_s=f"{tokens / (time.time() - t0):.0f}")
    info = {
        "prompts": len(prompts),
        "shards": len(plan),
        "built_now": len(todo),
        "from_saved_tokens": reused,
        "answer_tokens_now": tokens,
        "seconds_now": round(time.time() - t0, 1),
        **cfg.__dict__,
    }
    return finish_card(out, info, target.name, state)


def encode_pair(tokenizer, prompt: str, answer: str, max_prompt_tokens: int, max_answer_tokens: int):
    """Token ids of a prompt and its fixed answer through the chat template, and where the answer starts."""
    prompt_ids = encode_prompt(tokenizer, prompt)[-max_prompt_tokens:]
    answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"][:max_answer_tokens]
    eos = tokenizer.eos_token_id
    return prompt_ids + answer_ids + ([eos] if eos is not None else []), len(prompt_ids)


def build_fixed(
    target: TargetModel,
    pairs: list[tuple[str, str]],
    out: Path,
    cfg: DataConfig,
    progress: bool = True,
    features: bool = True,
    state=None,
) -> dict:
    """Features of the target over fixed (prompt, answer) pairs: no generation, so far cheaper per token. With
    `features` False, the shards hold tokens only (the tokenizer alone runs)."""
    out.mkdir(parents=True, exist_ok=True)
    encoded = [encode_pair(target.tokenizer, p, a, cfg.max_prompt_tokens, cfg.max_new_tokens) for p, a in pairs]
    plan, todo = planned_shards(out, [len(e) for e, _ in encoded], cfg, state)
    t0, tokens = time.time(), 0
    bar = tqdm(todo, desc="feature extraction", unit="batch", disable=not progress)
    for i in bar:
        seqs = [encoded[j][0] for j in plan[i]]
        hidden = features_batch(target, seqs) if features else None
        write_shard(shard_path(out, i), seqs, [encoded[j][1] for j in plan[i]], hidden)
        tokens += sum(len(s) for s in seqs)
        bar.set_postfix(tok_s=f"{tokens / (time.time() - t0):.0f}")
    info = {
        "pairs": len(pairs),
        "shards": len(plan),
        "built_now": len(todo),
        "tokens_now": tokens,
        "seconds_now": round(time.time() - t0, 1),
        "answers": "dataset",
        "features": features,
        **cfg.__dict__,
    }
    return finish_card(out, info, target.name, state)
