"""Train EAGLE, POSS-n and the matched-capacity control on the same data, steps and initialisation.

    python -m poss_core.training.train --preset smollm2-135m --data data/smollm2-135m \\
        --methods eagle,poss1,poss2,poss3,matched --steps 600 --out runs/smollm2-135m

Fairness (reference section 5): every method starts from the same initial layer (POSS specialists and the stacked
layers are copies of EAGLE's initial layer), sees the same batches in the same order and takes the same number of
optimizer steps. Checkpoints every --save-every steps make an interrupted run resume where it stopped.

One process or many, through accelerate (CUDA where present, else the CPU):

    torchrun --nproc_per_node 2 -m poss_core.training.train ...          # two processes, DDP
    accelerate launch --config_file configs/accelerate/8gpu-ddp.yaml -m poss_core.training.train ... \\
        --accelerate-config configs/accelerate/8gpu-ddp.yaml

Every process draws the same global batches (--tokens-per-batch) and trains its own share of their rows, so the
weights do not depend on the number of processes (up to the order of floating-point sums)."""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import torch

from ..base.errors import ConfigError, PossError, run_cli
from ..models.checkpoint import load_draft, save_draft
from ..models.draft import DraftModel, DraftSpec, draft_config_from_target
from ..models.presets import DEFAULT_PRESET
from ..models.target import TargetModel
from .distributed import Layout, check_launch, make_accelerator, read_launch_config, resolve_autocast
from .features import (
    FEATURE_MODES,
    FeatureFill,
    check_feature_mode,
    feature_source,
    index_shards,
    needs_target,
    shard_files,
    target_features,
)
from .loop import RunContext, train_one
from .losses import LossWeights
from .trainer import UNROLLS, RowBatch, TrainConfig, TrainSequence, make_batch

METHODS = {
    # name: (method, positions per specialist, simulated positions per step or 0 for "the depth")
    "eagle": ("eagle", 1, 1),
    "poss1": ("poss", 1, 0),
    "poss2": ("poss", 2, 0),
    "poss3": ("poss", 3, 0),
    "matched": ("stacked", 2, 1),
    # HASS's idea as a control for POSS: EAGLE's one layer, trained on the same unrolled positions as POSS (with
    # --unroll decoding), so POSS minus hass is what position specialisation adds.
    "hass": ("eagle", 1, 0),
}


def build_draft_vocab(seqs: list[TrainSequence], size: int, always: set[int]) -> torch.Tensor:
    """The draft vocabulary: the EOS/special ids in `always`, then the most frequent answer tokens, then (to cover
    text the answers never used) the most frequent prompt tokens, up to `size` ids, sorted."""
    answers: Counter[int] = Counter()
    prompts: Counter[int] = Counter()
    for s in seqs:
        mask = s.loss_mask.bool()
        answers.update(s.input_ids[mask].tolist())
        prompts.update(s.input_ids[~mask].tolist())
    chosen = set(always)
    for counts in (answers, prompts):
        for tok, _ in counts.most_common():
            if len(chosen) >= size:
                break
            chosen.add(tok)
    return torch.tensor(sorted(chosen), dtype=torch.long)


def vocab_coverage(seqs: list[TrainSequence], vocab: torch.Tensor) -> float:
    inside = set(vocab.tolist())
    total = hit = 0
    for s in seqs:
        toks = s.input_ids[s.loss_mask.bool()].tolist()
        total += len(toks)
        hit += sum(t in inside for t in toks)
    return hit / max(1, total)


def batch_indices(lengths: list[int], tokens_per_batch: int, seed: int) -> Iterator[list[int]]:
    """The rows of each global batch (indices into `lengths`), in a seeded endless order: rows are added until a batch
    holds `tokens_per_batch` tokens, and a row longer than a whole batch (a long document) is a batch of its own:
    padding every other row to its length would multiply the cost of the batch it landed in. It depends on the
    token counts alone, so every process (and every feature source) draws the same batches."""
    rng = random.Random(seed)
    order: list[int] = []
    while True:
        batch, used = [], 0
        while used < tokens_per_batch:
            if not order:
                order = list(range(len(lengths)))
                rng.shuffle(order)
            i = order.pop()
            if lengths[i] > tokens_per_batch:
                yield [i]
                continue
            batch.append(i)
            used += lengths[i]
        yield batch


class GlobalBatches:
    """An endless, seeded stream of global batches (row indices into `seqs`); `skip` passes over the batches a
    resumed run already used."""

    def __init__(self, seqs: list[TrainSequence], tokens_per_batch: int, seed: int):
        self.seqs = seqs
        self._rows = batch_indices([int(s.input_ids.numel()) for s in seqs], tokens_per_batch, seed)

    def __iter__(self) -> "GlobalBatches":
        return self

    def __next__(self) -> list[int]:
        return next(self._rows)

    def skip(self, n: int) -> None:
        for _ in range(n):
            next(self._rows)


class TokenBatches:
    """The global batches of `GlobalBatches` as whole padded batches (one process, no split). `fill` gives rows of a
    tokens-only folder their features as each batch is made (the batches are the same either way)."""

    def __init__(self, seqs: list[TrainSequence], tokens_per_batch: int, seed: int, fill: FeatureFill | None = None):
        self._batches = GlobalBatches(seqs, tokens_per_batch, seed)
        self._fill = fill or (lambda rows: rows)

    def __iter__(self) -> "TokenBatches":
        return self

    def __next__(self) -> RowBatch:
        return make_batch(self._fill([self._batches.seqs[i] for i in next(self._batches)]))

    def skip(self, n: int) -> None:
        self._batches.skip(n)


def token_batches(
    seqs: list[TrainSequence], tokens_per_batch: int, seed: int, fill: FeatureFill | None = None
) -> TokenBatches:
    return TokenBatches(seqs, tokens_per_batch, seed, fill)


def feature_fill(target_name: str, dtype: torch.dtype) -> FeatureFill:
    """Features for rows that have none, from a copy of the target in `dtype` (bf16: faster than fp32 on a CPU, and
    the precision data folders store features in). Rows that have features pass through untouched; the computed ones
    are not kept, so memory stays that of the tokens."""
    from ..models.loading import load_preset_target

    return target_features(load_preset_target(target_name, quantization="none", dtype=dtype))


def make_draft(
    target: TargetModel, name: str, depth: int, vocab: torch.Tensor | None, init: DraftModel | None, seed: int
) -> DraftModel:
    """A draft of kind `name`; its layers copy `init`'s first layer (so every method starts the same)."""
    method, n, _ = METHODS[name]
    layers = 1 if method == "eagle" else math.ceil(depth / n)
    torch.manual_seed(seed)
    draft = DraftModel(draft_config_from_target(target.config), DraftSpec(method, layers, n, True), vocab).float()
    if init is not None:
        draft.fc.load_state_dict(init.fc.state_dict())
        for layer in draft.layers:
            # strict=False: stacked layers after the first keep their own (fresh) input norm.
            layer.load_state_dict(init.layers[0].state_dict(), strict=False)
    draft.bind_target(target.input_embedding_weight(), target.lm_head_weight())
    return draft


def trained_draft(folder: str | Path, name: str, option: str, target: TargetModel) -> tuple[DraftModel, Path, str]:
    """The trained draft in `folder/name` (errors name the CLI `option` that asked for it), its folder, and where it
    came from with its step count, for the model card."""
    path = Path(folder) / name
    if not path.is_dir():
        raise PossError(f"{option} {folder}: there is no trained '{name}' draft in it ({path} is missing).")
    card = json.loads((path / "model_card.json").read_text()) if (path / "model_card.json").is_file() else {}
    return load_draft(path, target), path, f"{path} ({card.get('steps', '?')} steps before)"


def continue_from(draft: DraftModel, folder: str | Path, target: TargetModel, name: str) -> str:
    """Load the trained weights of `folder/name` into `draft` (its draft vocabulary may differ: the LM head is the
    target's, sliced, so only the fc and the layers carry over). Returns a description for the model card."""
    trained, path, source = trained_draft(folder, name, "--init-from", target)
    if trained.spec.method != draft.spec.method or len(trained.layers) != len(draft.layers):
        raise PossError(
            f"{path} is a {trained.spec.label} draft with {len(trained.layers)} layer(s); '{name}' needs "
            f"{draft.spec.method} with {len(draft.layers)}: continue from the drafts of the same methods."
        )
    weights = {k: v.float() for k, v in trained.state_dict().items() if not k.startswith("embed_tokens.")}
    draft.load_state_dict(weights, strict=False)
    return f"continued from {source}"


def trained_eagle(folder: str | Path, target: TargetModel) -> tuple[DraftModel, str]:
    """The trained EAGLE draft in `folder/eagle`, whose fc and layer every method's layers start from."""
    eagle, _, source = trained_draft(folder, "eagle", "--specialists-from", target)
    return eagle.float(), f"every layer copied from {source}"


@torch.no_grad()
def target_next_tokens(batches: list[RowBatch], full_head: torch.Tensor) -> list[torch.Tensor]:
    """The target's real next token (argmax over its full vocabulary) for every row of every batch."""
    return [(batch.target_features @ full_head.T).argmax(-1) for batch in batches]


@torch.no_grad()
def evaluate(
    draft: DraftModel,
    batches: list[RowBatch],
    positions: int,
    next_tokens: list[torch.Tensor] | None = None,
    unroll: str = "predicted",
) -> list[float]:
    """Held-out top-1 agreement with the target at each simulated draft position (1..positions), every draft
    unrolled the same way, so EAGLE and POSS are compared on equal terms.

    Without `next_tokens`, the target's choice is its argmax within the draft vocabulary (what the losses see); with
    the target's real next tokens (`target_next_tokens`, computed once for any number of drafts), a token outside
    the draft vocabulary counts as a miss: comparable across drafts with different vocabularies. `unroll` names the
    context of later positions (`UNROLLS`): "predicted" (every context feature a prediction) or "decoding" (the
    target's true features up to the chain's anchor, as a decoding draft sees)."""
    draft.eval()
    hits = [0.0] * positions
    total = 0.0
    for i, batch in enumerate(batches):
        if next_tokens is None:
            target_top = draft.head_logits(batch.target_features).argmax(-1)
        else:
            target_top = draft.to_draft_vocab(next_tokens[i])
        steps = UNROLLS[unroll](draft, batch, positions)
        for j, (_, pred) in enumerate(steps):
            hits[j] += float(((draft.head_logits(pred).argmax(-1) == target_top).float() * batch.mask).sum())
        total += float(batch.mask.sum())
    draft.train()
    return [h / max(total, 1.0) for h in hits]


# What the final held-out evaluation measures (--final-eval): each unroll costs minutes on a CPU, the decoding one
# the most, and an intermediate step that a later one continues does not need either.
FINAL_EVALS = {"both": ("predicted", "decoding"), "predicted": ("predicted",), "decoding": ("decoding",), "none": ()}
EVAL_KEYS = {"predicted": "heldout_top1_by_position", "decoding": "heldout_top1_by_position_decoding"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.training.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument(
        "--target",
        default=None,
        metavar="MODEL_ID_OR_FOLDER",
        help="any Hugging Face causal LM of the Llama family (Llama, Mistral, Qwen) instead of the preset's: the "
        "draft takes its hidden size, heads, vocabulary and RoPE",
    )
    p.add_argument("--data", nargs="+", required=True, help="data folders written by poss_core.training.data")
    p.add_argument("--methods", default="eagle,poss1,poss2,poss3,matched")
    p.add_argument("--depth", type=int, default=6, help="draft positions POSS is trained for")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument(
        "--epochs",
        type=float,
        default=None,
        help="train this many passes over the training tokens instead of --steps (the steps are counted from the "
        "data: epochs x training tokens / --tokens-per-batch)",
    )
    p.add_argument(
        "--tokens-per-batch",
        type=int,
        default=2048,
        help="tokens of each global batch (one optimizer step), whatever the number of processes",
    )
    p.add_argument(
        "--grad-accum",
        type=int,
        default=1,
        metavar="K",
        help="each process trains its share of a global batch in K micro-batches (less memory, the same weights)",
    )
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--noise", type=float, default=0.05, help="EAGLE's uniform input-feature noise (half-width)")
    p.add_argument("--draft-vocab", type=int, default=8192, help="0 = the full vocabulary")
    p.add_argument("--loss", default="paper", help="paper | hass | token-heavy")
    p.add_argument(
        "--unroll",
        choices=list(UNROLLS),
        default="predicted",
        help="how POSS's later training positions see their context: predicted = every context feature "
        "the previous step's prediction (cheap); decoding = the target's true features up to each "
        "chain's anchor and the draft's own after it, as decoding sees them (HASS's context "
        "alignment; about 3-4x the cost per step). Teacher-forced methods are unaffected",
    )
    p.add_argument("--heldout", type=float, default=0.03, help="fraction of training sequences held out")
    p.add_argument(
        "--final-eval",
        choices=list(FINAL_EVALS),
        default="both",
        help="held-out top-1 agreement after training, by unroll (recorded in the model card); none for "
        "an intermediate step that a later one continues",
    )
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0, help="initialisation, held-out split and (by default) batch order")
    p.add_argument(
        "--batch-seed",
        type=int,
        default=None,
        help="a different batch order for a later training step, keeping --seed's held-out split",
    )
    p.add_argument("--out", required=True, help="run folder (resume state, logs, final drafts)")
    p.add_argument(
        "--init-from",
        default=None,
        metavar="FOLDER",
        help="continue training the drafts in FOLDER/<method> (e.g. the bundled ones) instead of a "
        "shared fresh initialisation; every method gets the same extra steps and batches",
    )
    p.add_argument(
        "--specialists-from",
        default=None,
        metavar="FOLDER",
        help="start every method's layers (POSS's specialists, the matched control's stack, EAGLE's own "
        "layer) as copies of the trained FOLDER/eagle draft, as POSS's paper does; EAGLE thereby "
        "continues for the same steps, which keeps the comparison fair. Not with --init-from",
    )
    p.add_argument("--export", default=None, help="also write the final drafts here (e.g. assets/drafts/NAME)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument(
        "--features",
        choices=list(FEATURE_MODES),
        default="auto",
        help="online: the frozen target computes each batch's features on the training device, nothing is "
        "written; offline: the stored shards' features, read through memory maps; auto: stored where a folder "
        "has them, computed for tokens-only folders (data --tokens-only)",
    )
    p.add_argument(
        "--features-dtype",
        default="bfloat16",
        choices=["bfloat16", "float32"],
        help="the target's precision for features computed online",
    )
    p.add_argument(
        "--autocast",
        default=None,
        choices=["none", "bfloat16"],
        help="mixed precision for the draft's forward/backward (fp32 master weights); bfloat16 is "
        "about 2x faster for POSS on CPUs with AMX. Default: the accelerate launch's mixed_precision, else none",
    )
    p.add_argument(
        "--accelerate-config",
        default=None,
        metavar="YAML",
        help="the accelerate config this run was launched with (configs/accelerate/): a run whose processes, "
        "devices or precision differ from it is refused",
    )
    p.add_argument(
        "--log-rows",
        action="store_true",
        help="every process writes the training rows of its share of each step (METHOD/rows-rankN.jsonl)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (target sizes, each draft's layers, memory per GPU derived from the configuration) "
        "and load nothing",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return run_cli(run, parse_args(argv))


def check_args(args) -> None:
    """Every numeric flag in its range before the target loads (ConfigError names the flag)."""
    from ..base.settings import BOUNDS

    def integer(flag: str, lo: int, hi: int) -> None:
        value = getattr(args, flag)
        if not lo <= value <= hi:
            raise ConfigError(f"--{flag.replace('_', '-')}={value} is out of range: use an integer from {lo} to {hi}.")

    def number(flag: str, lo: float, hi: float, closed_lo: bool = False) -> None:
        value = getattr(args, flag)
        ok = math.isfinite(value) and (lo <= value if closed_lo else lo < value) and value <= hi
        if not ok:
            raise ConfigError(
                f"--{flag.replace('_', '-')}={value} is out of range: use a finite number "
                f"{'>=' if closed_lo else '>'} {lo:g} and <= {hi:g}."
            )

    integer("steps", 1, 10**7)
    number("lr", 0.0, 1.0, closed_lo=True)  # 0 is allowed: a no-op step (continuing a draft unchanged)
    integer("depth", 1, int(BOUNDS["depth"][1]))
    integer("tokens_per_batch", 1, 1 << 22)
    integer("grad_accum", 1, 4096)
    integer("max_len", 2, 1 << 20)
    integer("save_every", 1, 10**7)
    integer("draft_vocab", 0, 1 << 24)
    number("noise", 0.0, 10.0, closed_lo=True)
    number("heldout", 0.0, 0.5, closed_lo=True)
    if args.epochs is not None:
        number("epochs", 0.0, 10_000.0)


def method_names(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown:
        raise PossError(f"unknown method(s) {unknown}: use {', '.join(METHODS)}.")
    return names


def draft_layers(name: str, depth: int) -> tuple[int, int]:
    """A method's draft layers and the positions each training step simulates."""
    method, n, positions = METHODS[name]
    return (1 if method == "eagle" else math.ceil(depth / n)), (positions or depth)


def print_plan(args, names: list[str], target_name: str, autocast: str) -> None:
    """`--dry-run`: the run's plan from the target's configuration and the launch (nothing loads)."""
    from .plan import RunShape, plan_lines
    from .targets import target_config

    config = target_config(target_name, allow_twin=True)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    launch = read_launch_config(args.accelerate_config) if args.accelerate_config else {}
    processes = int(launch.get("num_processes", 1) or 1)
    shapes = {}
    for name in names:
        layers, positions = draft_layers(name, args.depth)
        shapes[name] = RunShape(
            layers=layers,
            positions=positions,
            draft_vocab=args.draft_vocab,
            tokens_per_batch=args.tokens_per_batch,
            processes=processes,
            micro_batches=args.grad_accum,
            online=args.features == "online",
            sharded_target=str(launch.get("distributed_type")) == "FSDP",
            autocast=autocast,
        )
    steps = f"{args.epochs:g} epochs" if args.epochs else f"{args.steps:,} steps"
    print(
        f"plan: {steps} of {args.tokens_per_batch:,}-token global batches over {processes} process(es), "
        f"{args.grad_accum} micro-batch(es) each; features {args.features}; autocast {autocast}"
    )
    for line in plan_lines(config, shapes, target_name):
        print(line)


def load_rows(args, eos_ids: set[int]) -> tuple[list[TrainSequence], list[TrainSequence], torch.Tensor | None, dict]:
    """The training and held-out rows (tokens only; features stay in their shards), the draft vocabulary and the
    data record of the model cards."""
    seqs = [s for folder in args.data for s in index_shards(folder, args.max_len)]
    if not seqs:
        raise PossError(f"no training sequences in {args.data}: run python -m poss_core.training.data first.")
    check_feature_mode(args.features, seqs, args.data)
    rng = random.Random(args.seed)
    rng.shuffle(seqs)
    n_held = max(1, int(len(seqs) * args.heldout))
    held, train_seqs = seqs[:n_held], seqs[n_held:]
    vocab = build_draft_vocab(train_seqs, args.draft_vocab, eos_ids) if args.draft_vocab else None
    data_info = {
        "folders": args.data,
        "sequences": len(train_seqs),
        "heldout_sequences": len(held),
        "answer_tokens": sum(int(s.loss_mask.sum()) for s in train_seqs),
        "tokens": sum(int(s.input_ids.numel()) for s in train_seqs),
        "draft_vocab": int(vocab.numel()) if vocab is not None else None,
        "draft_vocab_coverage": vocab_coverage(train_seqs, vocab) if vocab is not None else 1.0,
    }
    return train_seqs, held, vocab, data_info


class HeldoutBatches:
    """The held-out rows in batches of 8, their features fetched each time they are scored (nothing kept)."""

    def __init__(self, rows: list[TrainSequence], fill: FeatureFill, device):
        self.rows, self.fill, self.device = rows, fill, device

    def __iter__(self):
        for i in range(0, len(self.rows), 8):
            yield make_batch(self.fill(self.rows[i : i + 8])).to(self.device)


def load_target_on(target_name: str, accelerator, dtype: torch.dtype | None = None) -> TargetModel:
    """The target on this process's training device (a CUDA process's own GPU; the CPU otherwise)."""
    from ..models.loading import load_preset_target

    device = str(accelerator.device) if accelerator.device.type == "cuda" else None
    return load_preset_target(target_name, quantization="none", dtype=dtype, device=device)


def features_target(args, target_name: str, target: TargetModel, accelerator) -> TargetModel:
    """The frozen target in --features-dtype on the training device, for online features."""
    from ..models.loading import parse_dtype

    dtype = parse_dtype(args.features_dtype)
    return target if target.dtype == dtype else load_target_on(target_name, accelerator, dtype)


def export(draft: DraftModel, card: dict, folders: list[Path], target: TargetModel) -> None:
    """The trained draft and its model card in each folder (main process only)."""
    for folder in folders:
        save_draft(draft, folder, target, extra_meta={"training": card})
        (folder / "model_card.json").write_text(json.dumps(card, indent=2))


def run(args) -> int:
    from ..models.presets import get_preset

    check_args(args)
    names = method_names(args.methods)
    target_name = args.target or get_preset(args.preset).target
    autocast = resolve_autocast(args.autocast)
    if args.dry_run:
        print_plan(args, names, target_name, autocast)
        return 0
    missing = [f for f in args.data if not Path(f).is_dir()]
    if missing:
        shard_files(missing[0])  # the clear error, before any process group or model is set up
    if args.target:
        from .targets import target_config

        target_config(args.target)
    accelerator = make_accelerator()
    if args.accelerate_config:
        check_launch(
            read_launch_config(args.accelerate_config),
            args.accelerate_config,
            accelerator.num_processes,
            autocast,
            torch.cuda.is_available(),
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    main_process = accelerator.is_main_process
    target = load_target_on(target_name, accelerator)
    train_seqs, held, vocab, data_info = load_rows(args, set(target.eos_ids))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data_info["processes"] = accelerator.num_processes
    if args.epochs:
        args.steps = max(1, math.ceil(args.epochs * data_info["tokens"] / args.tokens_per_batch))
        data_info["epochs"] = args.epochs
    if main_process:
        print(json.dumps({"data": data_info}), flush=True)
    computing = needs_target(args.features, train_seqs + held)
    fill = feature_source(args.features, features_target(args, target_name, target, accelerator) if computing else None)
    if computing and main_process:
        print(
            f"[train] features {args.features}: each batch's features come from a {args.features_dtype} forward of "
            f"the target as training uses it",
            file=sys.stderr,
            flush=True,
        )
    layout = Layout(accelerator.process_index, accelerator.num_processes, args.grad_accum)
    ctx = RunContext(accelerator, layout, train_seqs, fill, log_rows=args.log_rows)
    weights = LossWeights.named(args.loss)
    init = make_draft(target, "eagle", args.depth, vocab, None, args.seed)
    init_note = "shared (EAGLE's initial layer, copied into every layer)"
    if args.specialists_from:
        if args.init_from:
            raise PossError("--specialists-from and --init-from both set where training starts: give one.")
        init, init_note = trained_eagle(args.specialists_from, target)
    cards = {}
    for name in names:
        cfg = TrainConfig(
            steps=args.steps,
            lr=args.lr,
            noise=args.noise,
            weights=weights,
            seed=args.seed,
            positions=draft_layers(name, args.depth)[1],
            autocast=autocast,
            unroll=args.unroll,
        )
        draft = make_draft(target, name, args.depth, vocab, init, args.seed)
        if args.init_from:
            init_note = continue_from(draft, args.init_from, target, name)
        batch_seed = args.seed if args.batch_seed is None else args.batch_seed
        draft, record = train_one(
            name, draft, GlobalBatches(train_seqs, args.tokens_per_batch, batch_seed), cfg, out, ctx, args.save_every
        )
        if main_process:
            heldout = HeldoutBatches(held, fill, accelerator.device)
            for unroll_name in FINAL_EVALS[args.final_eval]:
                record[EVAL_KEYS[unroll_name]] = evaluate(draft, heldout, args.depth, unroll=unroll_name)
            card = {
                **record,
                "label": draft.spec.label,
                "train_config": {**asdict(cfg), "weights": asdict(weights)},
                "tokens_per_batch": args.tokens_per_batch,
                "batch_seed": batch_seed,
                "data": data_info,
                "target": target.name,
                "init": init_note,
            }
            export(draft, card, [out / name / "final"] + ([Path(args.export) / name] if args.export else []), target)
            cards[name] = card
            print(json.dumps({"trained": name, **{k: v for k, v in record.items() if k != "method"}}), flush=True)
        accelerator.wait_for_everyone()
    if main_process:
        (out / "summary.json").write_text(json.dumps(cards, indent=2))
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
