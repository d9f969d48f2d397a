"""Self-distillation data: the target answers training prompts, and its features are stored in shards.

    python -m poss_core.training.data --preset smollm2-135m --prompts ../shared/data/train/*.jsonl \\
        --limit 1500 --max-new-tokens 192 --batch-size 16 --out data/smollm2-135m

Each batch becomes one shard (`shard-00012.safetensors`: tokens, loss mask, offsets, bf16 features). A rerun skips
shards that exist, so an interrupted job resumes without duplicating rows. The generated token ids are also kept in
`tokens/`; `pack_token_ids` turns them into one compressed `.npz` (small enough to commit), and `--from-ids FILE`
rebuilds the features from such a file on a fresh machine without generating again."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from ..base.errors import PossError, run_cli
from ..base.prompt_files import jsonl_rows, prompt_files, prompt_from_row, read_prompts
from ..decoding.decoder import encode_prompt
from ..models.presets import DEFAULT_PRESET
from ..models.target import TargetModel
from .trainer import TrainSequence


# ----- prompts -------------------------------------------------------------------------------------------------------
def conversation_rows(paths: list[str]) -> list[dict]:
    """Rows of JSONL files and of JSON files holding a list of rows (ShareGPT's own release is one JSON array)."""
    rows = list(jsonl_rows(paths))
    for f in prompt_files(paths):
        if f.suffix == ".json":
            try:
                loaded = json.loads(f.read_text())
            except json.JSONDecodeError as err:
                raise PossError(f"prompt file {f} is not valid JSON: {err}") from err
            if not isinstance(loaded, list):
                raise PossError(f"prompt file {f} holds no list of conversations (ShareGPT: a JSON array).")
            rows.extend(r for r in loaded if isinstance(r, dict))
    return rows


def row_prompt(row: dict) -> str | None:
    """The first user turn of a row: UltraChat's `data` list of alternating turns, or any layout `prompt_from_row`
    reads (ShareGPT's `conversations`, UltraChat-200k's `messages`, ...)."""
    turns = row.get("data")
    if isinstance(turns, list) and turns and isinstance(turns[0], str):
        return turns[0]
    return prompt_from_row(row)


def read_conversation_prompts(paths: list[str]) -> list[str]:
    """Prompts from conversation files (JSONL or JSON arrays) and text files (one prompt a line)."""
    prompts = [p for row in conversation_rows(paths) if (p := row_prompt(row)) and p.strip()]
    text = [str(f) for f in prompt_files(paths) if f.suffix not in (".json", ".jsonl")]
    return prompts + (read_prompts(text) if text else [])


def answer_from_row(row: dict) -> str | None:
    """A dataset's own answer for its prompt, where the layout has one (gsm8k, self-instruct, ShareGPT, UltraChat)."""
    turns = row.get("data")
    if isinstance(turns, list) and len(turns) > 1 and isinstance(turns[1], str):
        return turns[1]
    if "conversations" in row:
        for turn in row["conversations"]:
            if turn.get("from") in ("gpt", "assistant"):
                return str(turn.get("value", ""))
        return None
    if "messages" in row:
        answers = [m for m in row["messages"] if m.get("role") == "assistant"]
        return str(answers[0]["content"]) if answers else None
    if row.get("answer"):
        return str(row["answer"])
    instances = row.get("instances") or []
    if instances and instances[0].get("output"):
        return str(instances[0]["output"])
    return None


def read_pairs(paths: list[str]) -> list[tuple[str, str]]:
    """(prompt, dataset answer) pairs, for feature extraction on fixed answers (as EAGLE trained on ShareGPT)."""
    pairs = []
    for row in conversation_rows(paths):
        prompt, answer = row_prompt(row), answer_from_row(row)
        if prompt and answer and prompt.strip() and answer.strip():
            pairs.append((prompt, answer))
    return pairs


# ----- prompts the target writes itself (Magpie, arXiv 2406.08464) --------------------------------------------------
_PLACEHOLDER = "\u2063POSS_PROMPT\u2063"


def user_turn_prefix(tokenizer) -> list[int]:
    """Token ids of the chat template up to where a user's message begins (system prompt included)."""
    if not getattr(tokenizer, "chat_template", None):
        raise PossError("--self-prompts needs a target with a chat template (an instruct model).")
    text = tokenizer.apply_chat_template([{"role": "user", "content": _PLACEHOLDER}], tokenize=False)
    return tokenizer(text[: text.index(_PLACEHOLDER)], add_special_tokens=False)["input_ids"]


def _clean_prompt(text: str) -> str | None:
    text = text.strip()
    return text if len(text) >= 12 else None  # drops empty and one-word "prompts"


@torch.inference_mode()
def write_self_prompts(
    target: TargetModel,
    n: int,
    path: Path,
    batch_size: int,
    seed: int,
    max_tokens: int = 96,
    temperature: float = 1.0,
    top_p: float = 0.95,
    progress: bool = True,
) -> list[str]:
    """The target writes `n` user prompts: fed only the template's user-turn prefix, an instruct model samples the
    kind of request it was tuned on (general chat, writing, coding, advice), which covers what the eval sets ask far
    better than the GSM8K-heavy training files. Kept in `path` (JSONL, one line per batch) so a rerun resumes."""
    done: dict[int, list[str]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[int(row["batch"])] = row["prompts"]
    prefix = torch.tensor([user_turn_prefix(target.tokenizer)], device=target.device)
    pad = target.tokenizer.pad_token_id
    pad = pad if pad is not None else min(target.eos_ids or {0})
    batches = (n + batch_size - 1) // batch_size
    todo = [b for b in range(batches) if b not in done]
    for b in tqdm(todo, desc="self-prompts", unit="batch", disable=not progress):
        torch.manual_seed(seed * 100_003 + b)  # per batch, so a resumed run writes what an uninterrupted one would
        size = min(batch_size, n - b * batch_size)
        out = target.model.generate(
            prefix.expand(size, -1),
            attention_mask=torch.ones_like(prefix).expand(size, -1),
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_tokens,
            pad_token_id=pad,
            eos_token_id=sorted(target.eos_ids),
        )
        texts = target.tokenizer.batch_decode(out[:, prefix.shape[1] :], skip_special_tokens=True)
        done[b] = [t for t in map(_clean_prompt, texts) if t]
        with open(path, "a") as f:
            f.write(json.dumps({"batch": b, "prompts": done[b]}) + "\n")
    return list(dict.fromkeys(t for b in sorted(done) for t in done[b]))  # in batch order, each prompt once


# ----- generation and features -------------------------------------------------------------------------------------
@dataclass
class DataConfig:
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


@torch.inference_mode()
def features_batch(target: TargetModel, seqs: list[list[int]]) -> list[torch.Tensor]:
    """The target's last hidden states (after the final norm) for each sequence (right padding, real tokens only)."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    hidden = target.decoder(input_ids=ids.to(target.device), attention_mask=mask.to(target.device)).last_hidden_state
    return [hidden[i, : len(s)].cpu() for i, s in enumerate(seqs)]


def write_shard(path: Path, seqs: list[list[int]], prompt_lens: list[int], hidden: list[torch.Tensor] | None) -> None:
    """One batch's rows; `hidden` None writes a tokens-only shard (the trainer computes its features per batch)."""
    tokens = torch.tensor([t for s in seqs for t in s], dtype=torch.int32)
    loss_mask = torch.tensor(
        [int(i >= pl) for s, pl in zip(seqs, prompt_lens) for i in range(len(s))], dtype=torch.uint8
    )
    offsets = torch.tensor(
        [0] + list(torch.cumsum(torch.tensor([len(s) for s in seqs]), 0).tolist()), dtype=torch.int64
    )
    tensors = {"tokens": tokens, "loss_mask": loss_mask, "offsets": offsets}
    if hidden is not None:
        tensors["hidden"] = torch.cat(hidden).to(torch.bfloat16).contiguous()
    tmp = path.with_suffix(".partial")
    save_file(tensors, str(tmp))
    tmp.rename(path)  # a shard exists only when complete: resuming never reads half a shard


def read_shards(folder: str | Path, max_len: int = 512) -> list[TrainSequence]:
    """All sequences of a data folder, cut to `max_len` tokens; features stay bf16 until batched (None in a tokens-only
    folder). A sequence whose cut leaves no answer token (a long document's prompt alone) is left out: it would train
    nothing."""
    seqs = []
    for f in sorted(Path(folder).glob("shard-*.safetensors")):
        d = load_file(str(f))
        off = d["offsets"].tolist()
        for a, b in zip(off[:-1], off[1:]):
            b = min(b, a + max_len)
            if not bool(d["loss_mask"][a + 1 : b].any()):  # row 0 is never a prediction target
                continue
            hidden = d["hidden"][a:b] if "hidden" in d else None
            seqs.append(TrainSequence(d["tokens"][a:b].long(), hidden, d["loss_mask"][a:b]))
    return seqs


def prompts_in_folder(folder: str | Path) -> set[tuple[int, ...]]:
    """The prompt token ids (as encoded for generation) of every row of a data folder: from its token files where it
    has them (a fresh checkout), else from its feature shards (the prompt is what the loss mask leaves out)."""
    folder = Path(folder)
    found: set[tuple[int, ...]] = set()
    token_files = sorted((folder / "tokens").glob("tokens-*.json"))
    for f in token_files:
        rows = json.loads(f.read_text())
        found.update(tuple(ids[:pl]) for ids, pl in zip(rows["input_ids"], rows["prompt_lens"]))
    if not token_files:
        for f in sorted(folder.glob("shard-*.safetensors")):
            with safe_open(str(f), framework="pt") as shard:  # the token columns only, not the features
                off = shard.get_tensor("offsets").tolist()
                mask, tokens = shard.get_tensor("loss_mask"), shard.get_tensor("tokens")
            for a, b in zip(off[:-1], off[1:]):
                prompt_len = (b - a) - int(mask[a:b].sum())  # the mask is 0 on the prompt, 1 on the answer
                found.add(tuple(tokens[a : a + prompt_len].tolist()))
    if not found:
        raise PossError(f"--exclude {folder}: no rows found (expected tokens/tokens-*.json or shard-*.safetensors).")
    return found


def with_instruction(instruction: str, item):
    """A prompt (or a (prompt, answer) pair's prompt) with an instruction and a blank line put before it."""
    if isinstance(item, tuple):
        return (f"{instruction}\n\n{item[0]}", item[1])
    return f"{instruction}\n\n{item}"


def prompt_tokens(tokenizer, item) -> int:
    """A prompt's length in tokens as generation encodes it (chat template included), before any truncation."""
    return len(encode_prompt(tokenizer, item[0] if isinstance(item, tuple) else item))


def drop_used_prompts(tokenizer, items: list, used: set[tuple[int, ...]], max_prompt_tokens: int) -> list:
    """Items (prompts or (prompt, answer) pairs) whose encoded prompt is not in `used` (`prompts_in_folder` ids)."""

    def key(item) -> tuple[int, ...]:
        prompt = item[0] if isinstance(item, tuple) else item
        return tuple(encode_prompt(tokenizer, prompt)[-max_prompt_tokens:])

    return [item for item in items if key(item) not in used]


def shard_plan(lengths: list[int], batch_size: int, seed: int) -> list[list[int]]:
    """Deterministic batches of prompt indices, the same on every (re)run: prompts of similar length share a batch
    (less padding), and the batches come in a seeded random order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    plan = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    random.Random(seed).shuffle(plan)
    return plan


def tokens_path(out: Path, i: int) -> Path:
    return out / "tokens" / f"tokens-{i:05d}.json"


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


def finish_card(out: Path, info: dict, target_name: str, state) -> dict:
    """Merge every process's figures and write the data card from the main process."""
    info = merge_processes(info, state)
    if state is None or state.is_main_process:
        write_data_card(out, info, target_name)
    return info


@dataclass
class TokenShard:
    """One batch's generated rows: prompt + answer token ids and where each answer starts."""

    index: int
    input_ids: list[list[int]]
    prompt_lens: list[int]


def pack_token_ids(token_dir: Path, out_file: Path, card: dict | None = None) -> dict:
    """Every `tokens-XXXXX.json` of a folder in one compressed `.npz` (flat int32 ids, row lengths, prompt lengths,
    each shard's index and row count, and the folder's data card as JSON text): a fraction of the JSON's size, one
    file instead of dozens."""
    files = sorted(Path(token_dir).glob("tokens-*.json"))
    if not files:
        raise PossError(f"{token_dir}: no tokens-*.json files to pack.")
    ids, row_lens, prompt_lens, shard_index, shard_rows = [], [], [], [], []
    for f in files:
        rows = json.loads(f.read_text())
        shard_index.append(int(f.stem.split("-")[1]))
        shard_rows.append(len(rows["input_ids"]))
        for seq, pl in zip(rows["input_ids"], rows["prompt_lens"]):
            ids.extend(seq)
            row_lens.append(len(seq))
            prompt_lens.append(pl)
    arrays = {
        "input_ids": np.asarray(ids, dtype=np.int32),
        "row_lens": np.asarray(row_lens, dtype=np.int32),
        "prompt_lens": np.asarray(prompt_lens, dtype=np.int32),
        "shard_index": np.asarray(shard_index, dtype=np.int32),
        "shard_rows": np.asarray(shard_rows, np.int32),
        "card": np.asarray(json.dumps(card or {})),
    }  # a unicode scalar: loads without pickle
    out_file.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out_file, **arrays)
    return {"shards": len(files), "rows": len(row_lens), "tokens": len(ids)}


def read_token_ids(path: str | Path) -> list[TokenShard]:
    """The shards of a `pack_token_ids` file, in shard order (a clear error for a missing or malformed file)."""
    path = Path(path)
    if not path.is_file():
        raise PossError(f"token id file {path} does not exist.")
    try:
        with np.load(path, allow_pickle=False) as z:
            ids, row_lens, prompt_lens = z["input_ids"], z["row_lens"], z["prompt_lens"]
            shard_index, shard_rows = z["shard_index"], z["shard_rows"]
    except (OSError, KeyError, ValueError) as e:
        raise PossError(f"{path} is not a token id file written by pack_token_ids: {e}") from e
    if int(shard_rows.sum()) != len(row_lens) or int(row_lens.sum()) != len(ids) or len(prompt_lens) != len(row_lens):
        raise PossError(f"{path}: its row and shard counts do not add up; the file is damaged.")
    shards, row, start = [], 0, 0
    for index, n in zip(shard_index.tolist(), shard_rows.tolist()):
        seqs = []
        for length in row_lens[row : row + n].tolist():
            seqs.append(ids[start : start + length].tolist())
            start += length
        shards.append(TokenShard(index, seqs, prompt_lens[row : row + n].tolist()))
        row += n
    return shards


def build_from_ids(
    target: TargetModel | None, shards: list[TokenShard], out: Path, progress: bool = True, state=None
) -> dict:
    """The feature shards of saved token ids: only the target's forward runs, nothing is generated. Resumable, and
    split over the processes of `state`. Without a target, the shards hold tokens only (no forward at all; see
    `--tokens-only`)."""
    out.mkdir(parents=True, exist_ok=True)
    missing = [i for i, s in enumerate(shards) if not (out / f"shard-{s.index:05d}.safetensors").exists()]
    todo = [shards[i] for i in my_shards(missing, state)]
    t0, tokens = time.time(), 0
    bar = tqdm(todo, desc=f"{'features' if target else 'tokens'} {out.name}", unit="batch", disable=not progress)
    for s in bar:
        write_shard(
            out / f"shard-{s.index:05d}.safetensors",
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


def write_data_card(out: Path, info: dict, target_name: str) -> None:
    """Record how the folder was built. A rerun that built nothing (every shard already there) keeps the card of the
    run that did, so checking a finished folder never erases its build figures."""
    card = out / "data_card.json"
    if info["built_now"] == 0 and card.is_file():
        return
    card.write_text(json.dumps({**info, "target": target_name}, indent=2))


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
    plan = shard_plan([len(e) for e in encoded], cfg.batch_size, cfg.seed)[: cfg.max_shards or None]
    todo = my_shards([i for i in range(len(plan)) if not (out / f"shard-{i:05d}.safetensors").exists()], state)
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
        write_shard(out / f"shard-{i:05d}.safetensors", seqs, prompt_lens, hidden)
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
    plan = shard_plan([len(e) for e, _ in encoded], cfg.batch_size, cfg.seed)[: cfg.max_shards or None]
    todo = my_shards([i for i in range(len(plan)) if not (out / f"shard-{i:05d}.safetensors").exists()], state)
    t0, tokens = time.time(), 0
    bar = tqdm(todo, desc="feature extraction", unit="batch", disable=not progress)
    for i in bar:
        seqs = [encoded[j][0] for j in plan[i]]
        hidden = features_batch(target, seqs) if features else None
        write_shard(out / f"shard-{i:05d}.safetensors", seqs, [encoded[j][1] for j in plan[i]], hidden)
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


def main(argv: list[str] | None = None) -> int:
    from ..models.loading import add_dtype_argument  # torch is loaded by every run anyway

    p = argparse.ArgumentParser(
        prog="python -m poss_core.training.data",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--target", default=None, help="a model id or folder instead of the preset's target")
    p.add_argument(
        "--prompts",
        nargs="+",
        default=[],
        help="conversation files (ShareGPT or UltraChat layout, JSONL or a JSON array), other JSONL layouts or "
        "text files (globs allowed); never eval/",
    )
    p.add_argument(
        "--self-prompts",
        type=int,
        default=0,
        metavar="N",
        help="the target first writes N user prompts itself (Magpie: sampled from the chat template's "
        "user-turn prefix; kept in OUT/self_prompts.jsonl) and answers them with the others",
    )
    p.add_argument("--limit", type=int, default=None, help="use the first N prompts after a seeded shuffle")
    p.add_argument(
        "--exclude",
        nargs="+",
        default=[],
        metavar="FOLDER",
        help="leave out prompts that these data folders already answered (file prompts before the shuffle, "
        "self-written ones once written), so a new folder adds only new prompts",
    )
    p.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=256,
        help="keep the last N tokens of a longer prompt (raise it for long-context data: drafts trained "
        "only on short prompts draft worse over long documents)",
    )
    p.add_argument(
        "--min-prompt-tokens",
        type=int,
        default=0,
        help="use only prompts at least this long (through the chat template, before --max-prompt-tokens)",
    )
    p.add_argument(
        "--instruction",
        default=None,
        metavar="TEXT",
        help="put TEXT and a blank line before every file prompt, e.g. to have the target summarize "
        "documents: --instruction 'Summarize the following text in a few sentences.'",
    )
    p.add_argument("--out", required=True)
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--answers",
        choices=["target", "dataset"],
        default="target",
        help="target: the target writes the answers (self-distillation); dataset: use the rows' own "
        "answers and only extract features (much cheaper; EAGLE trained on fixed ShareGPT answers)",
    )
    p.add_argument(
        "--max-shards",
        type=int,
        default=0,
        metavar="N",
        help="build only the first N planned shards (0 = all); with --from-ids, only the first N saved ones",
    )
    p.add_argument(
        "--from-ids",
        default=None,
        metavar="FILE",
        help="rebuild the features from saved token ids (a .npz of pack_token_ids, e.g. "
        "assets/training_data/NAME.npz): nothing is generated and the prompt options are ignored",
    )
    p.add_argument(
        "--tokens-only",
        action="store_true",
        help="with --from-ids or --answers dataset: write the rows' token ids without the target's "
        "features (no forward now, a fraction of the disk); the trainer then computes each batch's "
        "features when it uses the batch, so a short run pays only for the rows it trains on",
    )
    add_dtype_argument(p, "the target's precision for generation (features are stored in bf16 either way)")
    return run_cli(run, p.parse_args(argv))


def run(args) -> int:
    from ..models.loading import load_preset_target, parse_dtype
    from ..models.presets import get_preset

    dtype = parse_dtype(args.dtype)
    state = process_state()
    main = state.is_main_process
    device = str(state.device) if state.device.type == "cuda" else None  # each GPU process generates on its own GPU

    def load(name: str):
        return load_preset_target(name, quantization="none", dtype=dtype, device=device)

    def say(text: str) -> None:
        if main:
            print(text, file=sys.stderr)

    def report(info: dict) -> None:
        if main:
            print(json.dumps(info))

    if args.max_prompt_tokens < 1 or args.min_prompt_tokens < 0:
        raise PossError("--max-prompt-tokens must be at least 1 and --min-prompt-tokens at least 0.")
    if args.max_shards < 0:
        raise PossError(f"--max-shards must be 0 (all) or a positive count, not {args.max_shards}.")
    if args.tokens_only and not args.from_ids and args.answers != "dataset":
        raise PossError(
            "--tokens-only needs rows that exist without generating: give --from-ids FILE or --answers dataset."
        )
    if args.from_ids:
        shards = read_token_ids(args.from_ids)[: args.max_shards or None]
        if args.tokens_only:
            report(build_from_ids(None, shards, Path(args.out), progress=main, state=state))
            return 0
        target = load(args.target or get_preset(args.preset).target)
        report(build_from_ids(target, shards, Path(args.out), progress=main, state=state))
        return 0
    cfg = DataConfig(
        args.max_new_tokens, args.max_prompt_tokens, args.batch_size, args.temperature, args.seed, args.max_shards
    )
    if not args.prompts and not args.self_prompts:
        raise PossError("give --prompts FILES, --self-prompts N, or both.")
    if args.self_prompts and args.answers == "dataset":
        raise PossError("--self-prompts has no dataset answers: use --answers target with it.")
    items = read_pairs(args.prompts) if args.answers == "dataset" else read_conversation_prompts(args.prompts)
    if args.instruction:
        items = [with_instruction(args.instruction, item) for item in items]
    if not items and not args.self_prompts:
        raise PossError("no usable prompts were found in the given files.")
    target = load(args.target or get_preset(args.preset).target)
    if args.min_prompt_tokens and items:
        before = len(items)
        items = [item for item in items if prompt_tokens(target.tokenizer, item) >= args.min_prompt_tokens]
        say(f"[data] --min-prompt-tokens {args.min_prompt_tokens}: {len(items)} of {before} prompts are that long")
        if not items and not args.self_prompts:
            raise PossError(f"no prompt has {args.min_prompt_tokens} tokens or more: lower --min-prompt-tokens.")
    used = set().union(*(prompts_in_folder(f) for f in args.exclude))  # read once, for file and self-written prompts
    if args.exclude and items:
        before = len(items)
        items = drop_used_prompts(target.tokenizer, items, used, cfg.max_prompt_tokens)
        say(
            f"[data] --exclude: {before - len(items)} of {before} prompts are already in "
            f"{', '.join(args.exclude)}; {len(items)} left"
        )
        if not items and not args.self_prompts:
            raise PossError("every prompt is already in the --exclude folders: give new prompt files.")
    random.Random(args.seed).shuffle(items)
    if args.limit:
        items = items[: args.limit]
    if args.self_prompts:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        with state.main_process_first():  # the main process writes them; the others then read the finished file
            written = write_self_prompts(
                target, args.self_prompts, out / "self_prompts.jsonl", args.batch_size, args.seed, progress=main
            )
        if args.exclude:  # a common request ("What is the capital of France?") may already be in a held-out folder
            kept = drop_used_prompts(target.tokenizer, written, used, cfg.max_prompt_tokens)
            say(
                f"[data] --exclude: {len(written) - len(kept)} of {len(written)} self-written prompts are already "
                f"in {', '.join(args.exclude)}"
            )
            written = kept
        items += written
    if not items:
        raise PossError("no prompts are left to answer after --exclude: raise --self-prompts or give new prompt files.")
    if args.answers == "dataset":
        report(build_fixed(target, items, Path(args.out), cfg, main, features=not args.tokens_only, state=state))
    else:
        report(build(target, items, Path(args.out), cfg, progress=main, state=state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
