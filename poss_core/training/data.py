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
from pathlib import Path

from ..base.errors import PossError, run_cli
from ..models.presets import DEFAULT_PRESET
from ..models.target import TargetModel
from .data_build import DataConfig, build, build_fixed, build_from_ids, process_state
from .prompts import (
    drop_used_prompts,
    prompt_tokens,
    prompts_in_folder,
    read_conversation_prompts,
    read_pairs,
    with_instruction,
    write_self_prompts,
)
from .shards import read_token_ids


# ----- flags ---------------------------------------------------------------------------------------------------------
def _target_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--target", default=None, help="a model id or folder instead of the preset's target")


def _prompt_flags(p: argparse.ArgumentParser) -> None:
    """Which prompts the target answers: files, its own, how many, and which to leave out."""
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


def _answer_flags(p: argparse.ArgumentParser) -> None:
    """Where the folder goes and how its answers are written (or taken from the dataset)."""
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


def _saved_ids_flags(p: argparse.ArgumentParser) -> None:
    """Rebuilding a folder from saved token ids, and folders without the target's features."""
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


def build_parser() -> argparse.ArgumentParser:
    from ..models.loading import add_dtype_argument  # torch is loaded by every run anyway

    p = argparse.ArgumentParser(
        prog="python -m poss_core.training.data",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _target_flags(p)
    _prompt_flags(p)
    _answer_flags(p)
    _saved_ids_flags(p)
    add_dtype_argument(p, "the target's precision for generation (features are stored in bf16 either way)")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_cli(run, build_parser().parse_args(argv))


# ----- the run -------------------------------------------------------------------------------------------------------
def run(args) -> int:
    from ..models.loading import parse_dtype

    dtype = parse_dtype(args.dtype)
    state = process_state()
    check_flags(args)
    info = rebuild_from_ids(args, dtype, state) if args.from_ids else answer_prompts(args, dtype, state)
    if state.is_main_process:
        print(json.dumps(info))
    return 0


def check_flags(args) -> None:
    """Flags out of range, and --tokens-only where the rows would have to be generated first."""
    if args.max_prompt_tokens < 1 or args.min_prompt_tokens < 0:
        raise PossError("--max-prompt-tokens must be at least 1 and --min-prompt-tokens at least 0.")
    if args.max_shards < 0:
        raise PossError(f"--max-shards must be 0 (all) or a positive count, not {args.max_shards}.")
    if args.tokens_only and not args.from_ids and args.answers != "dataset":
        raise PossError(
            "--tokens-only needs rows that exist without generating: give --from-ids FILE or --answers dataset."
        )


def load_target(args, dtype, state) -> TargetModel:
    """The target of --target or the preset, on this process's own GPU where it has one."""
    from ..models.loading import load_preset_target
    from ..models.presets import get_preset

    device = str(state.device) if state.device.type == "cuda" else None  # each GPU process generates on its own GPU
    name = args.target or get_preset(args.preset).target
    return load_preset_target(name, quantization="none", dtype=dtype, device=device)


def say(state, text: str) -> None:
    """A progress line on stderr, from the main process only."""
    if state.is_main_process:
        print(text, file=sys.stderr)


def rebuild_from_ids(args, dtype, state) -> dict:
    """--from-ids: the folder's shards from saved token ids (with the target's features unless --tokens-only)."""
    shards = read_token_ids(args.from_ids)[: args.max_shards or None]
    target = None if args.tokens_only else load_target(args, dtype, state)
    return build_from_ids(target, shards, Path(args.out), progress=state.is_main_process, state=state)


def answer_prompts(args, dtype, state) -> dict:
    """The prompts (files, then self-written), filtered and shuffled, answered by the target or the dataset."""
    cfg = DataConfig(
        args.max_new_tokens, args.max_prompt_tokens, args.batch_size, args.temperature, args.seed, args.max_shards
    )
    items = file_prompts(args)
    target = load_target(args, dtype, state)
    items = long_enough(args, target, items, state)
    used = set().union(*(prompts_in_folder(f) for f in args.exclude))  # read once, for file and self-written prompts
    items = not_answered(args, target, items, used, state)
    random.Random(args.seed).shuffle(items)
    if args.limit:
        items = items[: args.limit]
    if args.self_prompts:
        items += self_written(args, target, used, state)
    if not items:
        raise PossError("no prompts are left to answer after --exclude: raise --self-prompts or give new prompt files.")
    if args.answers == "dataset":
        return build_fixed(
            target, items, Path(args.out), cfg, state.is_main_process, features=not args.tokens_only, state=state
        )
    return build(target, items, Path(args.out), cfg, progress=state.is_main_process, state=state)


def file_prompts(args) -> list:
    """The prompt files' prompts, or (prompt, answer) pairs with --answers dataset, each after --instruction."""
    if not args.prompts and not args.self_prompts:
        raise PossError("give --prompts FILES, --self-prompts N, or both.")
    if args.self_prompts and args.answers == "dataset":
        raise PossError("--self-prompts has no dataset answers: use --answers target with it.")
    items = read_pairs(args.prompts) if args.answers == "dataset" else read_conversation_prompts(args.prompts)
    if args.instruction:
        items = [with_instruction(args.instruction, item) for item in items]
    if not items and not args.self_prompts:
        raise PossError("no usable prompts were found in the given files.")
    return items


def long_enough(args, target: TargetModel, items: list, state) -> list:
    """The file prompts at least --min-prompt-tokens long (through the chat template)."""
    if args.min_prompt_tokens and items:
        before = len(items)
        items = [item for item in items if prompt_tokens(target.tokenizer, item) >= args.min_prompt_tokens]
        say(
            state,
            f"[data] --min-prompt-tokens {args.min_prompt_tokens}: {len(items)} of {before} prompts are that long",
        )
        if not items and not args.self_prompts:
            raise PossError(f"no prompt has {args.min_prompt_tokens} tokens or more: lower --min-prompt-tokens.")
    return items


def not_answered(args, target: TargetModel, items: list, used: set[tuple[int, ...]], state) -> list:
    """The file prompts that no --exclude folder answered."""
    if args.exclude and items:
        before = len(items)
        items = drop_used_prompts(target.tokenizer, items, used, args.max_prompt_tokens)
        say(
            state,
            f"[data] --exclude: {before - len(items)} of {before} prompts are already in "
            f"{', '.join(args.exclude)}; {len(items)} left",
        )
        if not items and not args.self_prompts:
            raise PossError("every prompt is already in the --exclude folders: give new prompt files.")
    return items


def self_written(args, target: TargetModel, used: set[tuple[int, ...]], state) -> list[str]:
    """--self-prompts: the prompts the target writes itself (the main process writes them, the others then read the
    finished file), less those an --exclude folder answered."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with state.main_process_first():
        written = write_self_prompts(
            target,
            args.self_prompts,
            out / "self_prompts.jsonl",
            args.batch_size,
            args.seed,
            progress=state.is_main_process,
        )
    if args.exclude:  # a common request ("What is the capital of France?") may already be in a held-out folder
        kept = drop_used_prompts(target.tokenizer, written, used, args.max_prompt_tokens)
        say(
            state,
            f"[data] --exclude: {len(written) - len(kept)} of {len(written)} self-written prompts are already "
            f"in {', '.join(args.exclude)}",
        )
        written = kept
    return written


if __name__ == "__main__":
    sys.exit(main())
