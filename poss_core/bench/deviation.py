"""The deviation along the target's continuation for a results folder's records, computed after the run: one target
forward over each answer gives the features of the tokens it committed, and the same function the decoder runs
(`decoding.continuation.every_position_deviation`) rolls the draft forward from each round's root and from every
position the round covered. For records a run wrote without them (the decoder fills them in when a decode ends).

    python -m poss_core.bench deviation results/paper-10q [--threads 2]

Rewrites the folder's records.jsonl and its report; `python -m poss_core.bench evidence FOLDER --out
FILE` then writes the summary with it."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
from tqdm import tqdm

from ..base.errors import ConfigError
from ..decoding.continuation import every_position_deviation
from ..models.loading import load_preset_target, parse_dtype
from ..models.presets import get_preset
from ..models.target import TargetModel
from ..results.records import TurnRecord, read_records, records_in
from ..runtime import methods
from .rebuild import checked_summary
from .report import write_outputs


def roots_of(record: TurnRecord) -> list[int]:
    """Each round's root position in prompt + answer: the last token committed before the round."""
    roots, before = [], 0
    for e in record.events:
        roots.append(len(record.prompt_ids) + before - 1)
        before = e.new_tokens
    return roots


@torch.inference_mode()
def fill_record(record: TurnRecord, prompt_ids: list[int], target: TargetModel, draft, depth: int) -> bool:
    """Fill `record`'s rounds' continuation deviations (round roots and every position); False when it has no
    drafting rounds or no prompt ids."""
    drafted = [i for i, e in enumerate(record.events) if not e.prefill and e.nodes and e.draft_observed]
    if not drafted or not prompt_ids:
        return False
    record = replace(record, prompt_ids=list(prompt_ids)) if not record.prompt_ids else record
    tokens = torch.tensor(record.prompt_ids + record.token_ids)
    hidden = target.decoder(input_ids=tokens[None].to(target.device)).last_hidden_state[0]
    features = hidden[: len(tokens) - 1]  # as in decoding: the last token was never read
    roots = roots_of(record)  # (`record` may be a copy with the prompt: its events are the same objects)
    ends = [*roots[1:], len(tokens)]  # a round covers its root up to the next round's root
    from_root, every = every_position_deviation(draft, tokens, features, [(roots[i], ends[i]) for i in drafted], depth)
    for i, root_dev, every_dev in zip(drafted, from_root, every):
        record.events[i].continuation_deviation = root_dev
        record.events[i].every_position_deviation = every_dev
    return True


def prompts_of(records: Sequence[TurnRecord]) -> dict[tuple, list[int]]:
    """Each turn's prompt ids for every method: the plain lane keeps them. A later turn's prompt holds the method's
    own earlier answers, so it is the plain lane's only where those answers equal plain's (always, at temperature 0
    in float32, where the identity check passes); other turns get none and are left without."""
    plain = {r.key: r for r in records if r.method == methods.PLAIN}
    out: dict[tuple, list[int]] = {}
    for r in records:
        ref = plain.get(r.key)
        if ref is None or not ref.prompt_ids:
            continue
        earlier = [x for x in records if x.method == r.method and x.key[:3] == r.key[:3] and x.turn < r.turn]
        if all(plain.get(x.key) is not None and x.token_ids == plain[x.key].token_ids for x in earlier):
            out[(r.method, *r.key)] = ref.prompt_ids
    return out


def fill_folder(folder: Path, depth: int, preset_name: str, dtype: str | None) -> tuple[list[TurnRecord], int]:
    """Every draft method's records in `folder` filled in; returns them all and how many turns were filled."""
    records = read_records(records_in(folder))
    preset = get_preset(preset_name)
    target = load_preset_target(preset.target, quantization="none", dtype=parse_dtype(dtype))
    by_method: dict[str, list[TurnRecord]] = {}
    for r in records:
        if methods.uses_draft(r.method) and r.method != methods.ORACLE:
            by_method.setdefault(r.method, []).append(r)
    prompts = prompts_of(records)
    filled = 0
    for name, mine in by_method.items():
        method = methods.get_method(preset, name)
        if method.draft is None:
            continue
        draft = methods.load_draft(method, target, depth)
        for r in tqdm(mine, desc=f"deviation {name}", unit="turn"):
            filled += fill_record(r, prompts.get((r.method, *r.key), []), target, draft, depth)
    return records, filled


def deviation_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.bench deviation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("folder")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    folder = Path(args.folder)
    summary = checked_summary(folder / "summary.json")
    meta, depth = summary["meta"], int(summary["depth"])
    if not meta.get("preset"):
        raise ConfigError(f"{folder}/summary.json names no preset: its drafts cannot be found.")
    records, filled = fill_folder(folder, depth, meta["preset"], meta.get("dtype"))
    paths = write_outputs(folder, records, meta, depth, summary.get("identity"))
    print(f"filled {filled} turns; wrote " + ", ".join(str(p) for p in paths.values()))
    return 0
