"""The engine's own cost per round (everything but model forwards), measured by timing the model calls inside a real
decode: `python -m poss_core.bench overhead`."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..base.errors import PossError
from ..decoding.decoder import SpeculativeDecoder, encode_prompt
from ..decoding.oracle import OracleDecoder
from ..models.loading import add_dtype_argument, load_preset_target, parse_dtype
from ..models.presets import DEFAULT_PRESET, get_preset
from ..models.tiny import tiny_target
from ..rounds.events import DecodeSummary
from ..runtime import methods


@contextmanager
def _untimed(clock: dict):
    """Work whose model calls must not count towards any round (the oracle's plain run)."""
    saved = dict(clock)
    try:
        yield
    finally:
        clock.update(saved)


def measure_overhead(
    target,
    draft,
    cfg,
    prompt: str = "Tell me a story about a lighthouse keeper.",
    rounds: int = 60,
    warmup_rounds: int = 5,
) -> dict[str, float]:
    """Per draft round: wall, draft and verify ms as events report them, and the engine's own overhead = wall minus
    the time spent inside model forwards (the target's forward and LM head, the draft's specialist layers and its
    LM head), measured by timing those calls. Nodes per tree are reported to show the tree was full. `draft` None
    measures the oracle (the target's own continuation as the draft, padded to the budget): the round of a perfect
    draft that costs nothing to run.

    The target's LM head is also timed both ways on the same rounds: over the rows verification reads (what the
    engine does) and, as an extra call outside the round's accounting, over every slot of the tree (what it did
    before `verify.SlotRows`): an A/B in one run, so the machine's speed cancels out."""
    with timed_models(target, draft) as clock:
        ids = encode_prompt(target.tokenizer, prompt)
        dec = _decoder(target, draft, cfg, ids, clock, rounds + warmup_rounds)
        rows = timed_rounds(dec.generate(ids), clock, rounds + warmup_rounds)
    rows = rows[warmup_rounds:]
    if not rows:
        raise PossError("the decode ended before any round could be measured: raise --max-context or lower --rounds")
    return overhead_split(rows)


@contextmanager
def timed_models(target, draft) -> Iterator[dict[str, float]]:
    """Inside: the target's forward and LM head and the draft's specialist layers and head add their time to the
    clock yielded ("model", and each its own part; seconds). A verify pass also heads every slot of the tree once
    more, timed as "all_head" and "extra" (outside the engine's accounting). Instance attributes shadow the methods
    for these two objects only, and are gone again after: the engine's code is unchanged."""
    clock = {
        "model": 0.0,
        "extra": 0.0,
        "head": 0.0,
        "head_rows": 0,
        "all_head": 0.0,
        "all_rows": 0,
        "draft_layers": 0.0,
        "draft_head": 0.0,
    }

    def timed(fn, part: str | None = None):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent = time.perf_counter() - t0
                clock["model"] += spent
                if part:
                    clock[part] += spent

        return wrapper

    forward, logits = timed(type(target).forward.__get__(target)), timed(type(target).logits.__get__(target))

    def timed_head(hidden):
        before = clock["model"]
        out = logits(hidden)
        clock["head"] += clock["model"] - before
        clock["head_rows"] += int(hidden.shape[0])
        return out

    def forward_and_full_head(*a, **k):
        out = forward(*a, **k)
        if k.get("logits") == "none" and out.hidden.shape[0] > 1:  # a verify pass: the old LM head, for comparison
            t0 = time.perf_counter()
            type(target).logits(target, out.hidden)
            clock["all_head"] += time.perf_counter() - t0
            clock["extra"] += time.perf_counter() - t0
            clock["all_rows"] += int(out.hidden.shape[0])
        return out

    target.forward = forward_and_full_head
    target.logits = timed_head
    patched = [(target, "forward"), (target, "logits")]
    if draft is not None:
        draft.run_specialist = timed(type(draft).run_specialist.__get__(draft), "draft_layers")
        draft.head_logits = timed(type(draft).head_logits.__get__(draft), "draft_head")
        patched += [(draft, "run_specialist"), (draft, "head_logits")]
    try:
        yield clock
    finally:
        for obj, name in patched:
            obj.__dict__.pop(name, None)


def _decoder(target, draft, cfg, ids: list[int], clock: dict, rounds: int):
    """The decoder measured: the draft's, with no token limit before `rounds`; or, `draft` None, the oracle, whose
    plain run (and a near-tie's realignment) is made outside every round's model time."""
    if draft is not None:
        return SpeculativeDecoder(target, draft, cfg.changed(max_new_tokens=10**6))
    tokens = (rounds + 1) * (cfg.depth + 1)
    dec = OracleDecoder(target, cfg.changed(max_new_tokens=tokens))
    with _untimed(clock):
        dec.prepare(ids)
    realign = dec._realign

    def untimed_realign(emitted):  # a near-tie's plain run: not a round's model time either
        with _untimed(clock):
            return realign(emitted)

    dec._realign = untimed_realign
    return dec


class RoundTimes(NamedTuple):
    """One draft round as measured (ms, the comparison's extra LM-head call taken out of wall and verify)."""

    wall: float
    draft: float
    verify: float
    model: float
    nodes: int
    accept_len: int
    head: float
    head_rows: int
    all_head: float
    all_rows: int
    draft_layers: float
    draft_head: float


def timed_rounds(gen: Iterator, clock: dict, rounds: int) -> list[RoundTimes]:
    """The first `rounds` draft rounds of a decode (the prefill skipped), each with the clock's parts it added."""
    out = []
    last = dict(clock)
    for item in gen:
        if isinstance(item, DecodeSummary):
            break
        delta = {key: clock[key] - last[key] for key in clock}
        last = dict(clock)
        if item.prefill:
            continue
        # The comparison's extra LM-head call ran inside this round's verify timing: take it out again.
        extra_ms = delta["extra"] * 1000.0
        out.append(
            RoundTimes(
                item.wall_ms - extra_ms,
                item.draft_ms,
                item.verify_ms - extra_ms,
                delta["model"] * 1000.0,
                len(item.nodes),
                item.accept_len,
                delta["head"] * 1000.0,
                delta["head_rows"],
                delta["all_head"] * 1000.0,
                delta["all_rows"],
                delta["draft_layers"] * 1000.0,
                delta["draft_head"] * 1000.0,
            )
        )
        if len(out) >= rounds:
            gen.close()
            break
    return out


def overhead_split(rows: Sequence[RoundTimes]) -> dict[str, float]:
    """Means over the rounds (the engine's overhead also as a median and a share of the round); τ = accepted + 1."""
    col = RoundTimes(*zip(*rows))
    engine = [w - m for w, m in zip(col.wall, col.model)]
    return {
        "rounds": len(rows),
        "wall_ms": statistics.fmean(col.wall),
        "draft_ms": statistics.fmean(col.draft),
        "verify_ms": statistics.fmean(col.verify),
        "event_overhead_ms": statistics.fmean([w - d - v for w, d, v in zip(col.wall, col.draft, col.verify)]),
        "model_ms": statistics.fmean(col.model),
        "engine_ms": statistics.fmean(engine),
        "engine_ms_median": statistics.median(engine),
        "engine_share": statistics.fmean(engine) / statistics.fmean(col.wall),
        "nodes": statistics.fmean(col.nodes),
        "tau": statistics.fmean(a + 1 for a in col.accept_len),
        "head_ms": statistics.fmean(col.head),
        "head_rows": statistics.fmean(col.head_rows),
        "all_head_ms": statistics.fmean(col.all_head),
        "all_rows": statistics.fmean(col.all_rows),
        "draft_layers_ms": statistics.fmean(col.draft_layers),
        "draft_head_ms": statistics.fmean(col.draft_head),
    }


def overhead_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.bench overhead",
        description="The engine's own per-round cost (everything but model forwards).",
    )
    p.add_argument("--preset", default="tiny-random")
    p.add_argument("--draft", default="poss2", help="a draft of the preset, or oracle")
    p.add_argument(
        "--no-oracle",
        action="store_true",
        help="skip the oracle's split (printed after the draft's by default: the round of a perfect draft)",
    )
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--tree-budget", type=int, default=60)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default=None)
    add_dtype_argument(p)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    preset = get_preset(args.preset)
    target = load_preset_target(preset.target, quantization="none", device=args.device, dtype=parse_dtype(args.dtype))
    if preset.name == "tiny-random":
        # A tiny target with room for a long decode: the default tiny one has 512 positions.
        target = tiny_target(seed=0, max_positions=8192)
    cfg = methods.decode_config(preset, depth=args.depth, top_k=args.top_k, tree_budget=args.tree_budget)
    names = [args.draft] + ([] if args.no_oracle or args.draft == methods.ORACLE else [methods.ORACLE])
    for name in names:
        method = methods.get_method(preset, name)
        draft = None if method.oracle else methods.load_draft(method, target, args.depth)
        r = measure_overhead(target, draft, cfg, rounds=args.rounds)
        _print_split(preset.name, name, args, r)
    return 0


def _print_split(preset: str, name: str, args, r: dict[str, float]) -> None:
    what = (
        "the oracle (the target's own continuation, padded to the budget)"
        if name == methods.ORACLE
        else f"draft {name}"
    )
    print(
        f"{preset} target, {what}, depth {args.depth}, top-k {args.top_k}, tree budget "
        f"{args.tree_budget} ({r['nodes']:.0f} drafted nodes per round, τ {r['tau']:.2f}), {r['rounds']} rounds, "
        f"{torch.get_num_threads()} threads"
    )
    print(
        f"  round {r['wall_ms']:.2f} ms = draft {r['draft_ms']:.2f} + verify {r['verify_ms']:.2f} + rest "
        f"{r['event_overhead_ms']:.2f} (as events report them)"
    )
    if name != methods.ORACLE:
        rest = r["draft_ms"] - r["draft_layers_ms"] - r["draft_head_ms"]
        print(
            f"  draft {r['draft_ms']:.2f} ms = specialist layers {r['draft_layers_ms']:.2f} + draft head "
            f"{r['draft_head_ms']:.2f} + tree bookkeeping {rest:.2f} (top-k, masks, pruning: engine overhead)"
        )
    print(
        f"  model forwards {r['model_ms']:.2f} ms; engine overhead (everything else) {r['engine_ms']:.2f} ms "
        f"mean, {r['engine_ms_median']:.2f} ms median, {r['engine_share'] * 100:.0f}% of the round"
    )
    saved = r["all_head_ms"] - r["head_ms"]
    print(
        f"  target LM head per round: {r['head_ms']:.2f} ms over the {r['head_rows']:.1f} rows verification reads; "
        f"{r['all_head_ms']:.2f} ms over all {r['all_rows']:.1f} slots (timed on the same rounds): "
        f"{saved:.2f} ms saved, {100 * saved / (r['wall_ms'] + saved):.1f}% of a round that heads every slot"
    )


def linear_ab(draft, rows: Sequence[int] = (1, 8, 24), reps: int = 200) -> list[dict]:
    """The draft's decoding matmuls timed both ways on the same inputs, alternating call by call so the machine's
    speed cancels out: `F.linear` (oneDNN reorders the weight at every call) against `PackedLinear` (packed once).
    Per weight and row count: median microseconds each way and the largest difference between their outputs."""
    weights = draft.decode_weights()
    layer = weights["layers"][0]
    named = [
        ("fc", weights["fc"]),
        ("q/k/v", layer["qkv"]),
        ("o", layer["o"]),
        ("gate/up", layer["gate_up"]),
        ("down", layer["down"]),
        ("draft head", draft.packed_head()),
    ]
    gen = torch.Generator().manual_seed(0)
    out = []
    with torch.inference_mode():
        for name, lin in named:
            for m in rows:
                x = torch.randn(m, int(lin.weight.shape[1]), generator=gen).to(lin.weight.dtype)
                times: dict[str, list[float]] = {"plain": [], "packed": []}
                for _ in range(reps):
                    for way, fn in (("plain", lambda: F.linear(x, lin.weight, lin.bias)), ("packed", lambda: lin(x))):
                        t0 = time.perf_counter()
                        fn()
                        times[way].append((time.perf_counter() - t0) * 1e6)
                diff = float((F.linear(x, lin.weight, lin.bias).float() - lin(x).float()).abs().max())
                out.append(
                    {
                        "weight": name,
                        "shape": tuple(lin.weight.shape),
                        "rows": m,
                        "packed": lin.packed is not None,
                        "plain_us": statistics.median(times["plain"]),
                        "packed_us": statistics.median(times["packed"]),
                        "max_diff": diff,
                    }
                )
    return out


def linear_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.bench linear",
        description="The draft's decoding matmuls with weights packed once for oneDNN "
        "(PackedLinear) against F.linear, alternating on the same inputs.",
    )
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--draft", default="eagle")
    p.add_argument("--rows", default="1,8,24", help="comma-separated row counts (8 = a top-k 8 frontier)")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--threads", type=int, default=None)
    add_dtype_argument(p, default="bfloat16")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    preset, dtype = get_preset(args.preset), parse_dtype(args.dtype)
    target = (
        tiny_target(seed=0, dtype=dtype)
        if preset.name == "tiny-random"
        else load_preset_target(preset.target, quantization="none", dtype=dtype)
    )
    draft = methods.load_draft(methods.get_method(preset, args.draft), target, preset.depth)
    rows = [int(r) for r in args.rows.split(",") if r.strip()]
    results = linear_ab(draft, rows, args.reps)
    print(
        f"{preset.name} draft {args.draft}, {draft.fc.weight.dtype}, {torch.get_num_threads()} threads, "
        f"median of {args.reps} alternating calls (µs)"
    )
    print(f"{'weight':>11} {'shape':>12} {'rows':>5} {'F.linear':>9} {'packed':>8} {'speed-up':>9} {'max diff':>9}")
    for r in results:
        note = "" if r["packed"] else "  (not packed: F.linear both ways)"
        print(
            f"{r['weight']:>11} {'x'.join(map(str, r['shape'])):>12} {r['rows']:>5} {r['plain_us']:>9.1f} "
            f"{r['packed_us']:>8.1f} {r['plain_us'] / r['packed_us']:>8.2f}x {r['max_diff']:>9.2g}{note}"
        )
    return 0
