"""Command line: generate with a target and a draft (or plain decoding), streaming text or one JSON object per round.

python -m poss_core.generate --target PATH_OR_ID --draft random:poss2 --prompt "..." [--jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys

from .base import settings
from .base.errors import PossError, run_cli
from .base.json_safe import clean_json
from .decoding.config import check_prompt_text, check_prompt_tokens
from .decoding.decoder import encode_prompt
from .models.loading import load_preset_target, parse_dtype
from .models.numerics import NEAR_TIE, identity_divergence
from .models.presets import DraftRef, get_preset, resolve_draft_name
from .rounds.events import DecodeSummary
from .runtime import methods


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.generate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--preset",
        default=None,
        help="smollm2-135m (offline CPU default), llama3-8b-instruct, llama2-13b-chat, tiny-random",
    )
    p.add_argument("--target", help="Hugging Face id or local folder of the target model (instead of a preset)")
    p.add_argument(
        "--draft",
        default=None,
        help="a preset's draft name (eagle, poss1, poss2, poss3, matched, ...), a checkpoint folder, "
        "hub:ID, or random:eagle|poss1|poss2|poss3|matched",
    )
    p.add_argument(
        "--positions-per-specialist", type=int, default=None, help="n for a draft path that does not record it"
    )
    p.add_argument(
        "--allow-other-target",
        action="store_true",
        help="use a draft whose recorded target fingerprint differs from the loaded target",
    )
    p.add_argument("--prompt", required=True, help="the user's message")
    p.add_argument(
        "--method",
        choices=["spec", methods.PLAIN, methods.PLD, methods.ASSISTED],
        default="spec",
        help="spec = speculative decoding with --draft; plain = the target alone; "
        "pld = transformers' prompt lookup (no draft model); assisted = transformers' assisted "
        "generation with the preset's smaller model",
    )
    settings.add_flags(p, settings.GENERATE)  # the decoding settings, the quantization and --dtype
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps (default: the best available)")
    p.add_argument("--no-chat-template", action="store_true", help="feed the prompt as raw text")
    p.add_argument("--jsonl", action="store_true", help="one JSON object per round, then a summary object")
    p.add_argument(
        "--check-identity",
        action="store_true",
        help="then decode the prompt with plain decoding and compare token for token (temperature 0, where speculative "
        "decoding must reproduce it; a divergence is classified by plain's logit margin against the precision's "
        "rounding tolerance); exit 1 on a real mismatch",
    )
    return p


def _decode_config(args, preset):
    return methods.decode_config(preset, **settings.decoding(settings.from_flags(args, settings.GENERATE)))


def make_decoder(args):
    """Load what the arguments name and return (decoder, target)."""
    preset = get_preset(args.preset) if args.preset else None
    if preset is None and not args.target:
        raise PossError("give --preset NAME or --target ID_OR_FOLDER (e.g. --preset smollm2-135m).")
    config = _decode_config(args, preset)
    free = None  # prompt lookup or assisted generation: resolved before anything loads (a preset may lack one)
    if args.method in methods.TRAINING_FREE:
        if preset is None and args.method == methods.ASSISTED:
            raise PossError(f"--method {methods.ASSISTED} needs --preset: the preset names the assistant model.")
        free = methods.get_method(preset, args.method)
    target = load_preset_target(
        args.target or preset.target,
        quantization=args.quantization,
        device=args.device,
        dtype=parse_dtype(args.precision),
    )
    if args.method == methods.PLAIN:
        return methods.build_decoder(methods.PLAIN_METHODS[methods.PLAIN], target, config), target
    if free is not None:
        return methods.build_decoder(free, target, config), target
    if not args.draft:
        raise PossError("--draft is required for speculative decoding (or use --method plain).")
    ref = resolve_draft_name(preset, args.draft) if preset is not None else DraftRef(args.draft)
    if not ref.trained and not args.draft.startswith("random:"):
        print(f"[poss] note: {ref.label}", file=sys.stderr)
    method = methods.draft_method(args.draft, ref)
    draft = methods.load_draft(
        method,
        target,
        config.depth,
        positions_per_specialist=args.positions_per_specialist,
        allow_other_target=args.allow_other_target,
    )
    return methods.build_decoder(method, target, config, draft), target


def run(args) -> int:
    check_prompt_text(args.prompt, "--prompt")  # before anything loads (undecodable bytes arrive as surrogates)
    decoder, target = make_decoder(args)
    ids = encode_prompt(target.tokenizer, args.prompt, use_chat_template=not args.no_chat_template)
    check_prompt_tokens(len(ids), target.max_context)
    summary = None
    for item in decoder.generate(ids):
        if isinstance(item, DecodeSummary):
            summary = item
            if args.jsonl:
                print(json.dumps(clean_json(item.to_json())), flush=True)
            else:
                s = item.stats
                print(
                    f"\n[{args.method}] {s['new_tokens']} tokens, {s['tokens_per_s']:.1f} "
                    f"tokens/s, tau {s['tau']:.2f} over {s['rounds']} rounds, stop: {item.stop_reason}",
                    file=sys.stderr,
                )
        elif args.jsonl:
            print(json.dumps(clean_json(item.to_json())), flush=True)
        else:
            print(item.text, end="", flush=True)
    if summary is None or args.method == methods.PLAIN or not args.check_identity or args.temperature != 0:
        return 0
    return identity_check(args, target, ids, summary)


def identity_check(args, target, ids: list[int], summary: DecodeSummary) -> int:
    """Decode the prompt with plain decoding and compare token for token: one line on stderr, 1 on a real mismatch
    (a divergence beyond the precision's rounding tolerance), 0 when identical or parted at a rounding near-tie."""
    preset = get_preset(args.preset) if args.preset else None
    plain = methods.build_decoder(methods.PLAIN_METHODS[methods.PLAIN], target, _decode_config(args, preset))
    plain_ids = next(i for i in plain.generate(ids) if isinstance(i, DecodeSummary)).token_ids
    where = f"{str(target.dtype).replace('torch.', '')} on {target.device.type}"
    div = identity_divergence(target, ids, summary.token_ids, plain_ids)
    if div is None:
        line = f"Identity check PASSED: {len(plain_ids)} tokens identical to plain decoding ({where})"
    elif div.kind == NEAR_TIE:
        line = (
            f"Identity check PASSED up to rounding ({where}): parts from plain decoding at token {div.index} of "
            f"{len(plain_ids)}, {div.tie}: {div.reason}"
        )
    else:
        line = f"Identity check FAILED ({where}): parts from plain decoding at token {div.index}: {div.reason}"
    print(f"[{args.method}] {line}", file=sys.stderr, flush=True)
    return 1 if div is not None and div.kind != NEAR_TIE else 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
