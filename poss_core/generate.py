"""Command line: generate with a target and a draft (or plain decoding), streaming text or one JSON object per round.

    python -m poss_core.generate --target PATH_OR_ID --draft random:poss2 --prompt "..." [--jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from .decoding.config import DecodeConfig
from .decoding.decoder import PlainDecoder, SpeculativeDecoder, encode_prompt
from .decoding.events import DecodeSummary
from .errors import PossError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m poss_core.generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="Hugging Face id or local folder of the target model")
    p.add_argument("--draft", default=None,
                   help="draft checkpoint folder, random:eagle|poss1|poss2|poss3|matched, or a preset's draft name")
    p.add_argument("--prompt", required=True, help="the user's message")
    p.add_argument("--method", choices=["spec", "ar"], default="spec", help="ar = plain decoding (no draft)")
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--tree-budget", type=int, default=60)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps (default: the best available)")
    p.add_argument("--no-chat-template", action="store_true", help="feed the prompt as raw text")
    p.add_argument("--jsonl", action="store_true", help="one JSON object per round, then a summary object")
    return p


def _clean(obj):
    """JSON without NaN (positions no round reached are null)."""
    if isinstance(obj, float):
        return None if math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def make_decoder(args):
    """Load what the arguments name and return (decoder, tokenizer)."""
    from .models.loading import load_draft_by_name, load_target

    config = DecodeConfig(depth=args.depth, top_k=args.top_k, tree_budget=args.tree_budget,
                          temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                          seed=args.seed)
    if not args.target:
        raise PossError("--target is required: a Hugging Face id or a local model folder.")
    target = load_target(args.target, device=args.device)
    if args.method == "ar":
        return PlainDecoder(target, config), target
    if not args.draft:
        raise PossError("--draft is required for speculative decoding (or use --method ar).")
    draft = load_draft_by_name(args.draft, target, depth=config.depth)
    return SpeculativeDecoder(target, draft, config), target


def run(args) -> int:
    decoder, target = make_decoder(args)
    ids = encode_prompt(target.tokenizer, args.prompt, use_chat_template=not args.no_chat_template)
    for item in decoder.generate(ids):
        if isinstance(item, DecodeSummary):
            if args.jsonl:
                print(json.dumps(_clean(item.to_json())), flush=True)
            else:
                s = item.stats
                print(f"\n[{args.method}] {s['new_tokens']} tokens, {s['tokens_per_s']:.1f} tokens/s, "
                      f"tau {s['tau']:.2f} over {s['rounds']} rounds, stop: {item.stop_reason}", file=sys.stderr)
        elif args.jsonl:
            print(json.dumps(_clean(item.to_json())), flush=True)
        else:
            print(item.text, end="", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except PossError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a CLI prints one readable line, never a traceback
        print(f"error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
