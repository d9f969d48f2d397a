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
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..base.errors import ConfigError, PossError, run_cli
from ..models.checkpoint import save_draft
from ..models.draft import DraftModel
from ..models.presets import DEFAULT_PRESET
from ..models.target import TargetModel
from .batches import GlobalBatches, HeldoutBatches
from .distributed import Layout, check_launch, make_accelerator, read_launch_config, resolve_autocast
from .drafts import (
    build_draft_vocab,
    continue_from,
    draft_layers,
    make_draft,
    method_names,
    trained_eagle,
    vocab_coverage,
)
from .evaluate import evaluate
from .features import (
    FEATURE_MODES,
    FeatureFill,
    check_feature_mode,
    feature_source,
    index_shards,
    needs_target,
    shard_files,
)
from .loop import RunContext, train_one
from .losses import LossWeights
from .plan import print_plan
from .trainer import UNROLLS, TrainConfig, TrainSequence

# What the final held-out evaluation measures (--final-eval): each unroll costs minutes on a CPU, the decoding one
# the most, and an intermediate step that a later one continues does not need either.
FINAL_EVALS = {"both": ("predicted", "decoding"), "predicted": ("predicted",), "decoding": ("decoding",), "none": ()}
EVAL_KEYS = {"predicted": "heldout_top1_by_position", "decoding": "heldout_top1_by_position_decoding"}


# ----- flags ---------------------------------------------------------------------------------------------------------
def _model_flags(p: argparse.ArgumentParser) -> None:
    """What is trained: the target, its data folders, the methods and the depth POSS is trained for."""
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


def _length_flags(p: argparse.ArgumentParser) -> None:
    """How long a run trains, and on what batches."""
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


def _optimizer_flags(p: argparse.ArgumentParser) -> None:
    """The objective and its optimizer: learning rate, input noise, draft vocabulary, loss weights, unroll."""
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


def _heldout_flags(p: argparse.ArgumentParser) -> None:
    """The held-out rows and what is measured on them after training."""
    p.add_argument("--heldout", type=float, default=0.03, help="fraction of training sequences held out")
    p.add_argument(
        "--final-eval",
        choices=list(FINAL_EVALS),
        default="both",
        help="held-out top-1 agreement after training, by unroll (recorded in the model card); none for "
        "an intermediate step that a later one continues",
    )


def _run_folder_flags(p: argparse.ArgumentParser) -> None:
    """Checkpoints and seeds, the run folder, where the drafts start from and where they are exported."""
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


def _compute_flags(p: argparse.ArgumentParser) -> None:
    """Where and how the run computes: threads, the features' source, precision, the launch, logs, a dry run."""
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command's flags, group by group in the order --help lists them."""
    p = argparse.ArgumentParser(
        prog="python -m poss_core.training.train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flags in (_model_flags, _length_flags, _optimizer_flags, _heldout_flags, _run_folder_flags, _compute_flags):
        flags(p)
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


# ----- the run -------------------------------------------------------------------------------------------------------
@dataclass
class TrainRun:
    """What every method of one run shares: its flags, the target, the rows and where their features come from, the
    draft vocabulary, and the run folder."""

    args: argparse.Namespace
    target: TargetModel
    ctx: RunContext
    held: list[TrainSequence]
    vocab: torch.Tensor | None
    data_info: dict
    out: Path
    autocast: str
    weights: LossWeights

    @property
    def accelerator(self):
        return self.ctx.accelerator


def run(args) -> int:
    from ..models.presets import get_preset

    check_args(args)
    names = method_names(args.methods)
    target_name = args.target or get_preset(args.preset).target
    autocast = resolve_autocast(args.autocast)
    if args.dry_run:
        print_plan(args, names, target_name, autocast)
        return 0
    accelerator = start_accelerator(args, autocast)
    main_process = accelerator.is_main_process
    target = load_target_on(target_name, accelerator)
    train_seqs, held, vocab, data_info = load_rows(args, set(target.eos_ids))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    count_steps(args, data_info, accelerator.num_processes)
    if main_process:
        print(json.dumps({"data": data_info}), flush=True)
    fill = run_features(args, target_name, target, accelerator, train_seqs + held)
    layout = Layout(accelerator.process_index, accelerator.num_processes, args.grad_accum)
    ctx = RunContext(accelerator, layout, train_seqs, fill, log_rows=args.log_rows)
    weights = LossWeights.named(args.loss)
    train_run = TrainRun(args, target, ctx, held, vocab, data_info, out, autocast, weights)
    init, init_note = starting_draft(args, target, vocab)
    cards = {}
    for name in names:
        card = train_method(train_run, name, init, init_note)
        if card is not None:
            cards[name] = card
        accelerator.wait_for_everyone()
    if main_process:
        (out / "summary.json").write_text(json.dumps(cards, indent=2))
    accelerator.end_training()
    return 0


def start_accelerator(args, autocast: str):
    """The run's Accelerator, once the data folders and the target's configuration are found and the launch agrees
    with --accelerate-config (clear errors before any process group or model is set up)."""
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
    return accelerator


def count_steps(args, data_info: dict, processes: int) -> None:
    """The processes in the data record, and --epochs turned into optimizer steps (`args.steps`)."""
    data_info["processes"] = processes
    if args.epochs:
        args.steps = max(1, math.ceil(args.epochs * data_info["tokens"] / args.tokens_per_batch))
        data_info["epochs"] = args.epochs


def run_features(args, target_name: str, target: TargetModel, accelerator, rows: list[TrainSequence]) -> FeatureFill:
    """Where the batches' features come from (--features), with the target in --features-dtype where it computes
    them."""
    computing = needs_target(args.features, rows)
    fill = feature_source(args.features, features_target(args, target_name, target, accelerator) if computing else None)
    if computing and accelerator.is_main_process:
        print(
            f"[train] features {args.features}: each batch's features come from a {args.features_dtype} forward of "
            f"the target as training uses it",
            file=sys.stderr,
            flush=True,
        )
    return fill


def starting_draft(args, target: TargetModel, vocab: torch.Tensor | None) -> tuple[DraftModel, str]:
    """The layer every method starts from (a fresh EAGLE layer, or --specialists-from's trained one), and how the
    model card says it started."""
    init = make_draft(target, "eagle", args.depth, vocab, None, args.seed)
    init_note = "shared (EAGLE's initial layer, copied into every layer)"
    if args.specialists_from:
        if args.init_from:
            raise PossError("--specialists-from and --init-from both set where training starts: give one.")
        init, init_note = trained_eagle(args.specialists_from, target)
    return init, init_note


def train_method(shared: TrainRun, name: str, init: DraftModel, init_note: str) -> dict | None:
    """Train one method's draft, then (main process) score it on the held-out rows and export it with its model card,
    which it returns (None on the other processes)."""
    args = shared.args
    cfg = TrainConfig(
        steps=args.steps,
        lr=args.lr,
        noise=args.noise,
        weights=shared.weights,
        seed=args.seed,
        positions=draft_layers(name, args.depth)[1],
        autocast=shared.autocast,
        unroll=args.unroll,
    )
    draft = make_draft(shared.target, name, args.depth, shared.vocab, init, args.seed)
    if args.init_from:
        init_note = continue_from(draft, args.init_from, shared.target, name)
    batch_seed = args.seed if args.batch_seed is None else args.batch_seed
    batches = GlobalBatches(shared.ctx.seqs, args.tokens_per_batch, batch_seed)
    draft, record = train_one(name, draft, batches, cfg, shared.out, shared.ctx, args.save_every)
    if not shared.accelerator.is_main_process:
        return None
    heldout = HeldoutBatches(shared.held, shared.ctx.fill, shared.accelerator.device)
    for unroll_name in FINAL_EVALS[args.final_eval]:
        record[EVAL_KEYS[unroll_name]] = evaluate(draft, heldout, args.depth, unroll=unroll_name)
    card = {
        **record,
        "label": draft.spec.label,
        "train_config": {**asdict(cfg), "weights": asdict(shared.weights)},
        "tokens_per_batch": args.tokens_per_batch,
        "batch_seed": batch_seed,
        "data": shared.data_info,
        "target": shared.target.name,
        "init": init_note,
    }
    export(
        draft, card, [shared.out / name / "final"] + ([Path(args.export) / name] if args.export else []), shared.target
    )
    print(json.dumps({"trained": name, **{k: v for k, v in record.items() if k != "method"}}), flush=True)
    return card


if __name__ == "__main__":
    sys.exit(main())
