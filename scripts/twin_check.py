"""A paper-scale twin measured: Llama-3-8B-Instruct's architecture with random weights (models/twin.py) and random
drafts in the released EAGLE and PosS layouts. Per precision (the GPU's auto dtype, then 4-bit NF4): the memory the
target holds, plain decoding's step, the verify pass by tree size, drafting by depth for each draft layout, and the
speed-up projected at the paper's published acceptance (a projection: random drafts accept nothing, so no speed-up is
measured). Writes twin_check.json and twin_check.md into --out.

    python scripts/twin_check.py --preset llama3-8b-twin --out results/twin      # a CUDA GPU (about 20 GB)
    python scripts/twin_check.py --preset llama3-twin-tiny --out /tmp/twin        # the shrunken twin, any CPU

The 8B twin without CUDA exits 2 and says why (it is never built on a CPU: 16 GB in bf16, 32 GB in fp32).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file from anywhere: the package is beside

import torch
from tqdm import tqdm

from poss_core.autobudget.timing import measure_forward_curve
from poss_core.base.errors import ConfigError, run_cli
from poss_core.base.json_safe import clean_json
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import encode_prompt
from poss_core.models.hardware import cuda_available, hardware_info
from poss_core.models.loading import load_preset_target, parse_dtype
from poss_core.models.numerics import identity_divergence
from poss_core.models.presets import get_preset
from poss_core.models.twin import FULL, SHAPES, parameter_bytes
from poss_core.rounds.events import DecodeSummary, RoundEvent
from poss_core.runtime import methods

PROMPT = (
    "Explain, step by step, how a speculative decoder keeps the output of a large language model unchanged while "
    "a small draft model proposes several tokens at once, and why the first drafted positions are accepted more "
    "often than the later ones."
)
# Conditional pos-acc (%) by draft position 1..6, read off the POSS README figure (../shared/docs/poss-reference.md,
# section 6, ±0.5). With P(accept_len >= k) the product of pos-acc 1..k, tau = 1 + sum over k of that product: the
# acceptance the paper's drafts reach at depth 6. EAGLE-2's positions 5 and 6 are "below 65": 65 makes its tau an
# upper bound. Each is timed with the draft layout it was released in.
CONTEXT = 256  # tokens already in the cache when the verify pass is timed
PUBLISHED_POS_ACC = {
    "EAGLE-2": ([92.0, 78.4, 71.7, 67.1, 65.0, 65.0], "eagle", "at most: positions 5-6 read as below 65%"),
    "HASS": ([91.6, 83.7, 75.9, 71.8, 70.0, 70.8], "eagle", ""),
    "POSS-1": ([91.8, 83.6, 75.7, 73.0, 73.9, 74.5], "poss1", ""),
    "POSS-3": ([91.7, 83.6, 77.5, 73.1, 73.7, 71.9], "poss3", ""),
}


def published_tau(pos_acc: list[float]) -> float:
    """tau from conditional pos-acc (percent) by the chain rule: 1 + sum_k prod_{i<=k} pos-acc_i."""
    tau, reach = 1.0, 1.0
    for p in pos_acc:
        reach *= p / 100
        tau += reach
    return tau


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python scripts/twin_check.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--preset", default=FULL, choices=list(SHAPES), help=f"the twin (default {FULL})")
    p.add_argument("--out", required=True, help="folder for twin_check.json and twin_check.md")
    p.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: cuda when there is one, else cpu)")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="the unquantized target's precision and the 4-bit one's compute dtype (auto: bf16 on GPUs with bf16 "
        "units, fp16 on older ones, fp32 on a CPU)",
    )
    p.add_argument(
        "--quantizations", default="none,4bit", help="comma-separated, of none and 4bit (default: none,4bit)"
    )
    p.add_argument("--budgets", default="8,16,32,60", help="tree sizes whose verify pass is timed (default 8,16,32,60)")
    p.add_argument("--tokens", type=int, default=24, help="new tokens per timed decode (default 24)")
    p.add_argument("--repeats", type=int, default=5, help="timings per tree size, the median kept (default 5)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _decode(method, target, config: DecodeConfig, ids: list[int], draft=None) -> tuple[list[RoundEvent], list[int]]:
    """One decode: its rounds (the prefill left out) and its tokens."""
    rounds, summary = [], None
    for item in methods.build_decoder(method, target, config, draft).generate(ids):
        if isinstance(item, DecodeSummary):
            summary = item
        elif not item.prefill:
            rounds.append(item)
    return rounds, summary.token_ids if summary else []


def _memory(target, device: torch.device) -> dict:
    out = {"parameter_gb": parameter_bytes(target.model) / 1e9}
    if device.type == "cuda":
        out["cuda_allocated_gb"] = torch.cuda.memory_allocated(device) / 1e9
        out["cuda_peak_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
    return out


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def measure_draft(args, preset, target, name: str, ref, ids: list[int], plain_ids: list[int], identity: dict) -> dict:
    """One draft built and decoded on the target: its build, its draft time by depth and its rounds' medians; whether
    its tokens equal plain decoding's is counted in `identity`."""
    method = methods.draft_method(name, ref)
    t0 = time.perf_counter()
    draft = methods.load_draft(method, target, preset.depth)
    info = {
        "source": ref.source,
        "layers": len(draft.layers),
        "fc_bias": draft.fc.bias is not None,
        "build_s": time.perf_counter() - t0,
        "parameter_gb": parameter_bytes(draft) / 1e9,
    }
    run_cfg = DecodeConfig(
        max_new_tokens=args.tokens, depth=preset.depth, top_k=preset.top_k, tree_budget=preset.tree_budget
    )
    rounds, tokens = _decode(method, target, run_cfg, ids, draft)
    by_depth = [r.draft_ms_by_depth for r in rounds if r.draft_ms_by_depth]
    info["draft_ms_by_depth"] = [_median([d[k] for d in by_depth if len(d) > k]) for k in range(preset.depth)]
    info["round_ms"] = _median([r.wall_ms for r in rounds])
    info["verify_ms"] = _median([r.verify_ms for r in rounds])
    info["overhead_ms"] = _median([r.overhead_ms for r in rounds])
    info["tree_nodes"] = _median([float(len(r.nodes)) for r in rounds])
    identity["checked"] += 1
    div = identity_divergence(target, ids, tokens, plain_ids)
    if div is None:
        identity["identical"] += 1
    else:
        identity["divergences"].append(
            {"draft": name, "index": div.index, "kind": div.kind, "margin": div.margin, "tolerance": div.tolerance}
        )
    return info


def measure_mode(args, preset, device: torch.device, dtype, mode: str, budgets: list[int], bar) -> dict:
    """Everything measured for one precision: build, memory, plain step, verify by tree size, draft by depth."""
    bar.set_description(f"{mode}: building the target")
    _free(device)
    t0 = time.perf_counter()
    target = load_preset_target(preset.target, quantization=mode, device=str(device), dtype=dtype)
    result: dict = {
        "quantization": mode,
        "dtype": str(target.dtype).replace("torch.", ""),
        "build_s": time.perf_counter() - t0,
        "hardware": hardware_info(target),
    }
    result["memory_target"] = _memory(target, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)  # from here: the peak while decoding (a 4-bit build peaks in bf16)
    bar.update()
    ids = encode_prompt(target.tokenizer, PROMPT)
    result["prompt_tokens"] = len(ids)
    plain = methods.PLAIN_METHODS[methods.PLAIN]
    _decode(plain, target, DecodeConfig(max_new_tokens=4), ids)  # warm-up: kernels, allocator
    bar.set_description(f"{mode}: plain decoding")
    rounds, plain_ids = _decode(plain, target, DecodeConfig(max_new_tokens=args.tokens), ids)
    result["plain"] = {
        "step_ms": _median([r.wall_ms for r in rounds]),
        "verify_ms": _median([r.verify_ms for r in rounds]),
        "tokens": len(plain_ids),
    }
    bar.update()
    bar.set_description(f"{mode}: verify pass by tree size")
    # The verify forward timed on its own, synchronised (a round's own split is not, on a GPU: its kernels run on
    # while the host goes on, so the round's wall time is what a projection may use, not its verify/overhead split).
    curve = measure_forward_curve(target, sizes=budgets, context=CONTEXT, repeats=args.repeats)
    result["verify_ms_by_tree_size"] = {
        str(n): {"forward_ms": f, "lm_head_ms": h, "total_ms": f + h}
        for n, f, h in zip(curve.sizes, curve.ms, curve.post_ms or [0.0] * len(curve.sizes))
    }
    bar.update()
    drafts: dict[str, dict] = {}
    identity = {"checked": 0, "identical": 0, "divergences": []}
    for name, ref in preset.drafts.items():
        bar.set_description(f"{mode}: draft {name}")
        drafts[name] = measure_draft(args, preset, target, name, ref, ids, plain_ids, identity)
        bar.update()
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the peak stays recorded: it is read once every draft has decoded
    if device.type == "cuda":
        result["memory_peak_decoding_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
    result["drafts"] = drafts
    result["identity"] = identity
    result["projection"] = project(result)
    del target
    _free(device)
    return result


def project(result: dict) -> list[dict]:
    """Speed-up projected at the paper's published tau: tau x plain's step / a round of that draft's layout at the
    preset's depth and tree (measured here, with its drafting, verify and overhead). A projection: it assumes the
    twin's round costs what a trained draft's round costs, which acceptance barely changes (a longer accepted path
    only moves more cache slots)."""
    rows = []
    plain_ms = result["plain"]["step_ms"]
    for label, (pos_acc, layout, caveat) in PUBLISHED_POS_ACC.items():
        draft = result["drafts"].get(layout) or {}
        round_ms = draft.get("round_ms")
        tau = published_tau(pos_acc)
        speedup = tau * plain_ms / round_ms if plain_ms and round_ms else None
        rows.append(
            {
                "method": label,
                "layout": layout,
                "published_tau": round(tau, 3),
                "round_ms": round_ms,
                "plain_step_ms": plain_ms,
                "projected_speedup": speedup,
                "note": caveat,
            }
        )
    return rows


def _fmt(x, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _gb(x) -> str:
    """Gigabytes, or megabytes below 0.1 GB (the shrunken twin's few hundred kB stay readable)."""
    if x is None:
        return "n/a"
    return f"{x:.2f} GB" if x >= 0.1 else f"{x * 1e3:.2f} MB"


def markdown(report: dict) -> str:
    lines = [
        f"# Twin check: {report['preset']} ({report['date']})",
        "",
        f"{report['description']}. Random weights: memory and timings are the paper's scale; acceptance is not "
        "(random drafts accept nothing), so speed-ups below are projections at the paper's published τ.",
        "",
    ]
    for mode in report["modes"]:
        hw = mode["hardware"]
        mem = mode["memory_target"]
        sizes = mode["verify_ms_by_tree_size"]
        lines += [
            f"## {mode['dtype']}, quantization {mode['quantization']} ({hw['device']}, torch {hw['torch']})",
            "",
            f"- Target memory: parameters {_gb(mem['parameter_gb'])}"
            + (
                f"; CUDA allocated {_gb(mem['cuda_allocated_gb'])}, peak while building "
                f"{_gb(mem['cuda_peak_gb'])}; peak while decoding with the drafts "
                f"{_gb(mode.get('memory_peak_decoding_gb'))}"
                if "cuda_allocated_gb" in mem
                else ""
            )
            + f". Built in {_fmt(mode['build_s'])} s.",
            f"- Plain decoding: {_fmt(mode['plain']['step_ms'])} ms a token ({mode['prompt_tokens']}-token prompt).",
            f"- Identity with plain decoding: {mode['identity']['identical']} of {mode['identity']['checked']} "
            f"decodes identical"
            + (f"; divergences {mode['identity']['divergences']}" if mode["identity"]["divergences"] else "")
            + ".",
            "",
            f"Verify pass after a {CONTEXT}-token context (median of {report['repeats']}, synchronised):",
            "",
            "| verified tokens | " + " | ".join(sizes) + " |",
            "|---|" + "---|" * len(sizes),
            "| forward ms | " + " | ".join(_fmt(sizes[n]["forward_ms"]) for n in sizes) + " |",
            "| LM head ms (every row) | " + " | ".join(_fmt(sizes[n]["lm_head_ms"]) for n in sizes) + " |",
            "| total ms | " + " | ".join(_fmt(sizes[n]["total_ms"]) for n in sizes) + " |",
            "",
            f"Each draft decoding {report['settings']['tree_budget']}-node trees of depth {report['settings']['depth']}"
            " (a round's verify/overhead split is the decoder's own, unsynchronised on a GPU; its round ms is wall "
            "time):",
            "",
            "| draft (layout) | layers | fc bias | memory | draft ms at depth 1..6 | verify ms | overhead ms "
            "| round ms |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, d in mode["drafts"].items():
            depths = ", ".join(_fmt(v) for v in d.get("draft_ms_by_depth", []))
            lines.append(
                f"| {name} ({d['source']}) | {d['layers']} | {d['fc_bias']} | {_gb(d['parameter_gb'])} | {depths} "
                f"| {_fmt(d.get('verify_ms'))} "
                f"| {_fmt(d.get('overhead_ms'))} | {_fmt(d.get('round_ms'))} |"
            )
        lines += [
            "",
            "Projection (not a measurement): speed-up = published τ × plain's step ÷ this layout's round.",
            "",
            "| method | layout timed | published τ (depth 6) | round ms | projected speed-up |",
            "|---|---|---|---|---|",
        ]
        for row in mode["projection"]:
            note = f" ({row['note']})" if row["note"] else ""
            lines.append(
                f"| {row['method']} | {row['layout']} | {row['published_tau']:.2f}{note} | {_fmt(row['round_ms'])} "
                f"| {_fmt(row['projected_speedup'], 2)}× (projected) |"
            )
        lines.append("")
    lines.append(
        "Published τ: 1 + Σ_k Π_{i≤k} pos-acc_i over the conditional pos-acc the POSS README's figure gives for "
        "positions 1-6 (read off a chart, ±0.5 points)."
    )
    return "\n".join(lines) + "\n"


def run(args) -> int:
    preset = get_preset(args.preset)
    gpu = cuda_available()
    if args.preset == FULL and (not gpu or (args.device or "cuda").split(":")[0] != "cuda"):
        why = "torch.cuda.is_available() is False" if not gpu else f"--device {args.device} is not a CUDA device"
        print(
            f"twin_check: {FULL} is built only on a CUDA GPU ({why}); it is 8B parameters (16 GB in bf16), never "
            f"built on a CPU. Nothing was run. On a CPU, try --preset llama3-twin-tiny.",
            file=sys.stderr,
        )
        return 2
    device = torch.device(args.device or ("cuda" if gpu else "cpu"))
    modes = [m.strip() for m in args.quantizations.split(",") if m.strip()]
    if not modes or any(m not in ("none", "4bit") for m in modes):
        raise ConfigError(f"--quantizations {args.quantizations!r}: use a comma-separated list of none and 4bit.")
    try:
        budgets = sorted({int(b) for b in args.budgets.split(",") if b.strip()} | {preset.tree_budget})
    except ValueError:
        raise ConfigError(f"--budgets {args.budgets!r}: use comma-separated tree sizes, e.g. 8,16,32,60.") from None
    if args.repeats < 1 or args.tokens < 2:
        raise ConfigError(f"--repeats {args.repeats} and --tokens {args.tokens}: use at least 1 and 2.")
    dtype = parse_dtype(args.dtype)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps_per_mode = 3 + len(preset.drafts)
    report = {
        "preset": preset.name,
        "description": preset.description,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python", "scripts/twin_check.py", *sys.argv[1:]]),
        "settings": {"depth": preset.depth, "top_k": preset.top_k, "tree_budget": preset.tree_budget},
        "repeats": args.repeats,
        "modes": [],
    }
    with tqdm(total=steps_per_mode * len(modes), disable=args.no_progress, file=sys.stderr) as bar:
        for mode in modes:
            report["modes"].append(measure_mode(args, preset, device, dtype, mode, budgets, bar))
    (out / "twin_check.json").write_text(json.dumps(clean_json(report), indent=2) + "\n", encoding="utf-8")
    (out / "twin_check.md").write_text(markdown(report), encoding="utf-8")
    print(f"twin_check: report in {out / 'twin_check.md'}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
