"""Top-1 agreement with the target by draft position, for trained drafts on a data folder none of them trained on.

    python -m poss_core.training.evaluate --preset smollm2-135m --data data/smollm2-135m-selfeval \\
        --drafts assets/drafts/smollm2-135m runs/s4-export --methods eagle,poss2,poss3,matched

Every draft is unrolled the same way (`--unroll predicted` by default: step j reads step j-1's predicted features)
and compared with the target's real next token over the full vocabulary (a token outside a draft's vocabulary is a
miss), so drafts with different vocabularies, and drafts before and after more training, are compared on equal
terms. This is an offline proxy for the benchmark's pos-acc, cheap enough to run after every training step; it
reads only the data folders given, so keep one made from prompts no draft trained on (a different --seed of
--self-prompts, say).

The default is harsher than decoding at k >= 2: at step j *every* context feature is a step-(j-1) prediction, while
a decoding draft reads the target's true features up to the last verified token and its own only for the newest
few. A draft trained teacher-forced only (the matched control) scores near zero there at k >= 2 yet accepts well in
decoding. `--unroll decoding` gives every step the context decoding gives it instead."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from ..base.errors import PossError, run_cli
from ..models.draft import DraftModel
from ..models.presets import DEFAULT_PRESET
from .shards import read_shards
from .trainer import UNROLLS, RowBatch, make_batch


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.training.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--target", default=None, help="a model id or folder instead of the preset's target")
    p.add_argument("--data", nargs="+", required=True, help="data folders written by poss_core.training.data")
    p.add_argument("--drafts", nargs="+", required=True, help="folders holding one subfolder per method")
    p.add_argument("--methods", default="eagle,hass,poss1,poss2,poss3,matched")
    p.add_argument("--depth", type=int, default=6, help="draft positions to unroll")
    p.add_argument(
        "--unroll",
        choices=list(UNROLLS),
        default="predicted",
        help="predicted: every context feature a prediction (POSS's default training unroll); decoding: "
        "true features up to the chain's anchor, predictions after it (as in decoding; ~3.5x the "
        "compute)",
    )
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument(
        "--max-len",
        type=int,
        default=512,
        help="cut sequences to N tokens (raise it for long-context folders; their prompts alone exceed 512)",
    )
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the results here (JSON)")
    return run_cli(run, p.parse_args(argv))


def run(args) -> int:
    from ..models.checkpoint import load_draft, stored_label
    from ..models.loading import load_preset_target
    from ..models.presets import get_preset

    if args.threads:
        torch.set_num_threads(args.threads)
    seqs = [s for folder in args.data for s in read_shards(folder, args.max_len)]
    if not seqs:
        raise PossError(
            f"no sequences with answer tokens in {args.data} within --max-len {args.max_len}: run "
            "python -m poss_core.training.data first, or raise --max-len for long prompts."
        )
    target = load_preset_target(args.target or get_preset(args.preset).target, quantization="none")
    batches = [make_batch(seqs[i : i + args.batch_size]) for i in range(0, len(seqs), args.batch_size)]
    next_tokens = target_next_tokens(batches, target.lm_head_weight().detach().float())
    answer_rows = int(sum(float(b.mask.sum()) for b in batches))
    results = []
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for folder in args.drafts:
        for name in tqdm(methods, desc=f"evaluate {folder}"):
            path = Path(folder) / name
            if not path.is_dir():
                print(f"[poss] skipping {path}: not found", file=sys.stderr)
                continue
            draft = load_draft(path, target).float()
            top1 = evaluate(draft, batches, args.depth, next_tokens, unroll=args.unroll)
            results.append(
                {
                    "drafts": str(folder),
                    "method": name,
                    "label": stored_label(path) or draft.spec.label,
                    "top1_by_position": [round(x, 4) for x in top1],
                }
            )
            print(json.dumps(results[-1]), flush=True)
    if not results:
        raise PossError(f"none of {methods} was found in {args.drafts}.")
    report = {
        "data": args.data,
        "sequences": len(seqs),
        "answer_rows": answer_rows,
        "unroll": args.unroll,
        "results": results,
    }
    print(markdown_table(report))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


def markdown_table(report: dict) -> str:
    depth = max(len(r["top1_by_position"]) for r in report["results"])
    lines = [
        f"Top-1 agreement with the target by draft position ({report['sequences']} sequences, "
        f"{report['answer_rows']} answer tokens, {report.get('unroll', 'predicted')} unroll)",
        "",
        "| drafts | draft | " + " | ".join(f"k={k}" for k in range(1, depth + 1)) + " |",
        "|---|---|" + "---|" * depth,
    ]
    for r in report["results"]:
        lines.append(
            f"| {r['drafts']} | {r['label']} | " + " | ".join(f"{x:.3f}" for x in r["top1_by_position"]) + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
