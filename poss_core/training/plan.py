"""A training run's plan before anything loads (`train --dry-run`): each draft's parameters and the memory one GPU
holds, derived by arithmetic from the target's configuration. Every figure here is derived, not measured: the
measured ones are in docs/training.md."""

from __future__ import annotations

import math
from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class RunShape:
    """What sets a run's memory: the draft, the batch and how it is split, and where features come from."""

    layers: int  # draft layers (POSS specialists, the matched control's stack, or 1)
    positions: int  # simulated draft positions per step (1: teacher-forced)
    draft_vocab: int  # 0: the target's whole vocabulary
    tokens_per_batch: int  # the global batch
    processes: int
    micro_batches: int
    online: bool  # the frozen target runs on every GPU (its weights are held there)
    sharded_target: bool  # FSDP: each GPU holds 1/processes of the target
    autocast: str


def layer_parameters(config) -> int:
    """One Llama decoder layer of the target's sizes, without its input norm (the draft's first layer reads the
    target's normalised feature)."""
    h, i = config.hidden_size, config.intermediate_size
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or h // heads
    attention = h * heads * head_dim * 2 + h * kv * head_dim * 2  # q and o, k and v
    return attention + 3 * h * i + h  # SwiGLU MLP and the post-attention norm


def target_parameters(config) -> int:
    """The target's parameters: its layers, embedding and (untied) LM head."""
    h, v = config.hidden_size, config.vocab_size
    per_layer = layer_parameters(config) + h  # with its input norm
    head = 0 if getattr(config, "tie_word_embeddings", False) else v * h
    return config.num_hidden_layers * per_layer + v * h + head + h


def memory_per_gpu(config, shape: RunShape) -> dict[str, float]:
    """GiB one GPU holds at the peak of a step, by part (derived, not measured):
    - draft: fp32 master weights, gradients and AdamW's two moments (16 bytes a trainable parameter), plus DDP's
      gradient buckets (4 more);
    - frozen: the copied input embedding (fp32) and the LM head's draft-vocabulary rows (fp32);
    - target: the frozen target in bf16 when features are computed online (a 1/processes shard under FSDP);
    - activations: a micro-batch's tokens through every unrolled position (the layer's inputs and outputs kept for
      backward, about 12 hidden-sized and 3 MLP-sized values a token, in the autocast precision) and the loss's
      logits (fp32 logits, target probabilities and log-softmax, over the draft vocabulary, answer rows only)."""
    h, v = config.hidden_size, config.vocab_size
    vocab = shape.draft_vocab or v
    trainable = 2 * h * h + h + shape.layers * layer_parameters(config)
    tokens = math.ceil(shape.tokens_per_batch / (shape.processes * shape.micro_batches))
    width = 2 if shape.autocast == "bfloat16" else 4
    per_token = (12 * h + 3 * config.intermediate_size) * width
    target = target_parameters(config) * 2 if shape.online else 0
    if shape.sharded_target:
        target /= shape.processes
    return {
        "draft (weights, gradients, AdamW, DDP buckets)": trainable * 20 / GIB,
        "frozen embedding and LM head rows (fp32)": (v * h + vocab * h) * 4 / GIB,
        "target weights (bf16)": target / GIB,
        "activations": (tokens * shape.positions * per_token + tokens * vocab * 4 * 3) / GIB,
    }


def plan_lines(config, methods: dict[str, RunShape], target: str) -> list[str]:
    """The plan as printed lines: the target's sizes, then one row per method with its GiB per GPU by part."""
    kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    lines = [
        f"target {target}: hidden {config.hidden_size}, {config.num_hidden_layers} layers, "
        f"{config.num_attention_heads} heads ({kv} key-value), MLP {config.intermediate_size}, "
        f"vocabulary {config.vocab_size:,}, "
        f"{target_parameters(config) / 1e9:.2f} B parameters",
        "memory per GPU, GiB (derived from the configuration by arithmetic, not measured):",
    ]
    header = None
    for name, shape in methods.items():
        parts = memory_per_gpu(config, shape)
        if header is None:
            header = "| method | layers | positions | tokens per micro-batch | " + " | ".join(parts) + " | total |"
            lines += [header, "|---" * (5 + len(parts)) + "|"]
        tokens = math.ceil(shape.tokens_per_batch / (shape.processes * shape.micro_batches))
        lines.append(
            f"| {name} | {shape.layers} | {shape.positions} | {tokens:,} | "
            + " | ".join(f"{x:.1f}" for x in parts.values())
            + f" | {sum(parts.values()):.1f} |"
        )
    return lines


def print_plan(args, names: list[str], target_name: str, autocast: str) -> None:
    """`--dry-run`: the run's plan from the target's configuration and the launch (nothing loads)."""
    # Imported here: the arithmetic above needs none of them, and drafts.py brings in torch and the models.
    from .distributed import read_launch_config
    from .drafts import draft_layers
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
