"""Does `torch.compile` pay for the draft step on this machine? Times one drafting depth of a bundled draft (its
specialist layer over the frontier rows, the draft-vocabulary head, log-softmax and top-k) as the engine runs it
(eager, its matmuls on weights packed once for oneDNN) and with the specialist layer compiled by `torch.compile`
(inductor, from the plain weights, which it fuses and lays out itself), on the same rows, alternating the two in
one run so the machine's speed cancels out. The first compiled call's compile time is printed too.

    python scripts/draft_step_compile.py [--draft eagle] [--dtype bfloat16] [--rows 8] [--context 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file from anywhere: the package is beside

import torch

from poss_core.models.draft import DraftKV
from poss_core.models.loading import load_preset_target, parse_dtype
from poss_core.models.packed_linear import PackedLinear
from poss_core.models.presets import DEFAULT_PRESET, get_preset
from poss_core.runtime import methods


def unpacked(layer: dict) -> dict:
    """A layer's decoding weights with plain `F.linear` matmuls (inductor cannot lower oneDNN's packed linear; it
    fuses and lays out the plain ones itself)."""
    return {
        **layer,
        **{
            name: PackedLinear(layer[name].weight, layer[name].bias, pack=False)
            for name in ("qkv", "o", "gate_up", "down")
        },
    }


def depth_step(
    draft, decode_layer, layers: list[dict], kv: DraftKV, tokens, feats, context: int, k: int
) -> torch.Tensor:
    """One drafting depth over `tokens` (all seeing the whole context), its keys and values dropped afterwards."""
    n = int(tokens.numel())
    allowed = torch.ones(n, context + n, dtype=torch.bool)
    positions = torch.full((n,), context)
    x = draft.decode_weights()["fc"](torch.cat([draft.embed_tokens(tokens).to(feats.dtype), feats], dim=-1))
    cos, sin = draft._rope_rows(positions, x.dtype)
    for li in draft.groups[0]:
        x = decode_layer(layers[li], li, x, cos, sin, allowed[None, None], kv)
    top = torch.topk(torch.log_softmax(draft.head_logits(x).float(), dim=-1), k, dim=-1)
    for li in draft.groups[0]:
        kv.truncate(li, context)
    return top.values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python scripts/draft_step_compile.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--draft", default="eagle")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--rows", type=int, default=8, help="frontier rows per depth (the tree's top-k)")
    p.add_argument("--context", type=int, default=300, help="context rows already in the draft's cache")
    p.add_argument("--reps", type=int, default=300)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    preset = get_preset(args.preset)
    target = load_preset_target(preset.target, quantization="none", dtype=parse_dtype(args.dtype))
    draft = methods.load_draft(methods.get_method(preset, args.draft), target, preset.depth)
    h, dtype = draft.config.hidden_size, draft.fc.weight.dtype
    gen = torch.Generator().manual_seed(0)
    kv = DraftKV(len(draft.layers))
    with torch.inference_mode():
        ctx_tokens = torch.randint(0, draft.config.vocab_size, (args.context,), generator=gen)
        draft._decode_rows(
            0,
            ctx_tokens,
            torch.randn(args.context, h, generator=gen).to(dtype),
            torch.arange(args.context),
            torch.ones(args.context, args.context).tril().bool(),
            kv,
        )
        tokens = torch.randint(0, draft.config.vocab_size, (args.rows,), generator=gen)
        feats = torch.randn(args.rows, h, generator=gen).to(dtype)
        eager, packed = draft._decode_layer, draft.decode_weights()["layers"]
        plain = [unpacked(layer) for layer in packed]
        t0 = time.perf_counter()
        compiled = torch.compile(eager, dynamic=True)
        depth_step(draft, compiled, plain, kv, tokens, feats, args.context, args.rows)
        print(f"first compiled call (compiling): {time.perf_counter() - t0:.1f} s")
        times: dict[str, list[float]] = {"eager": [], "compiled": []}
        for _ in range(args.reps):
            for name, fn, layers in (("eager", eager, packed), ("compiled", compiled, plain)):
                t = time.perf_counter()
                depth_step(draft, fn, layers, kv, tokens, feats, args.context, args.rows)
                times[name].append((time.perf_counter() - t) * 1000.0)
    for name, ms in times.items():
        print(
            f"{name:9s} one drafting depth: {statistics.median(ms):.3f} ms median, {statistics.fmean(ms):.3f} ms mean"
        )
    ratio = statistics.median(times["compiled"]) / statistics.median(times["eager"])
    print(
        f"compiled / eager: {ratio:.2f} ({args.draft}, {args.dtype}, {args.rows} rows, {args.context} context rows, "
        f"{args.threads} threads)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
