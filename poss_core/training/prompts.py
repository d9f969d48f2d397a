"""Where training prompts come from: conversation files (with their datasets' own answers), prompts the target writes
itself, and the prompts a data folder has already answered (to leave out of a new one)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from tqdm import tqdm

from ..base.errors import PossError
from ..base.prompt_files import jsonl_rows, prompt_files, prompt_from_row, read_prompts
from ..decoding.decoder import encode_prompt
from ..models.target import TargetModel


# ----- conversation files ---------------------------------------------------------------------------------------------
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


# ----- prompts already answered ---------------------------------------------------------------------------------------
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
