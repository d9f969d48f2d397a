"""The project's benchmark settings as one command each, over the six evaluation sets in ../shared/data/eval/.

    python scripts/benchmark.py paper [--limit 3] [--drafts DIR] [--out results/paper] [--evidence]
    python scripts/benchmark.py auto  [--max-new-tokens 64] [--drafts DIR] [--out results/auto]
    python scripts/benchmark.py demo  [--out results/demo] [--evidence]
    python scripts/benchmark.py quantized [--out results/quantized]

paper: the paper's settings (fp32, depth 6, top-k 10, a 60-token tree, 64 new tokens, one run): τ and pos-acc, which
do not depend on the machine's speed. auto: bf16 with the tree budget chosen for this machine (`--tree-budget auto`,
recalibrated), two timed runs over two questions per set: the wall-clock speed-up; run it on a quiet machine.
demo: the Demo tab's default tree (depth 6, top-k 8, 32 nodes, no depth stop, every lane the same) in bf16, two
timed runs over three questions per set: the speed-up a class sees; its `--evidence` goes to PRESET-demo.json.
Anything after `--` goes to `python -m poss_core.bench` unchanged. `--drafts DIR` measures other drafts than the
bundled ones (e.g. runs/smollm2-135m/teacher-forced-t0/drafts). Progress, tables and charts come from the benchmark
itself.
`--evidence` then writes the run's evidence summary to assets/evidence/PRESET.json (what the app's Evidence tab
shows): `python scripts/benchmark.py paper --evidence` is the command that refreshes the bundled drafts' one.
quantized: the paper's tree (fp32 compute, 128 new tokens, two questions per set) with the target in full precision,
8-bit and 4-bit NF4 (bitsandbytes), the drafts unchanged, one folder each under --out; then one table of τ,
speed-up, plain tokens/s and the identity check per quantization (docs/results.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a file from anywhere: the package is beside

from poss_core.models.presets import DEFAULT_PRESET  # noqa: E402

EVAL_GLOB = "../shared/data/eval/*.jsonl"

SETTINGS = {
    "paper": {
        "methods": "plain,eagle,hass,poss1,poss2,poss3,matched,pld",
        "limit": 3,
        "max_new_tokens": 64,
        "flags": ["--runs", "1", "--depth", "6", "--top-k", "10", "--tree-budget", "60"],
    },
    "auto": {
        "methods": "plain,plain-float32,eagle,poss2,poss3,pld",
        "limit": 2,
        "max_new_tokens": 64,
        "flags": ["--runs", "2", "--tree-budget", "auto", "--dtype", "bfloat16", "--remeasure"],
    },
    "demo": {
        "methods": "plain,eagle,hass,poss1,poss2,poss3,matched",
        "limit": 3,
        "max_new_tokens": 64,
        "flags": [
            "--runs",
            "2",
            "--depth",
            "6",
            "--top-k",
            "8",
            "--tree-budget",
            "32",
            "--dtype",
            "bfloat16",
            "--no-hf-generate",
        ],
    },
    "quantized": {
        "methods": "plain,eagle,poss2",
        "limit": 2,
        "max_new_tokens": 128,
        "flags": ["--runs", "1", "--depth", "6", "--top-k", "10", "--tree-budget", "60", "--no-hf-generate"],
    },
}
QUANTIZATIONS = ("none", "8bit", "4bit")  # the `quantized` setting runs once per mode


def bench_commands(args: argparse.Namespace, extra: list[str]) -> list[list[str]]:
    """One benchmark command, or for `quantized` one per quantization mode (each in its own folder)."""
    if args.settings != "quantized":
        return [bench_command(args, extra)]
    out = args.out or "results/quantized"
    modes = args.quantization.split(",") if args.quantization else QUANTIZATIONS
    unknown = sorted(set(modes) - set(QUANTIZATIONS))
    if unknown:
        raise SystemExit(f"error: --quantization {','.join(unknown)}: use some of {','.join(QUANTIZATIONS)}.")
    return [bench_command(args, ["--quantization", q, *extra], out=f"{out}/{q}") for q in modes]


def quantized_table(out: str) -> str:
    """τ (mean of datasets, 95% interval), speed-up and tokens/s (pooled), per quantization and method, with each
    run's identity check, as a Markdown table."""
    from poss_core.results.analysis import OVERALL
    from poss_core.results.evidence import load_evidence

    rows = [
        "| target | method | τ, mean of datasets (95% interval) | speed-up | tokens/s | identity with plain |",
        "|---|---|---|---|---|---|",
    ]
    for q in QUANTIZATIONS:
        path = ROOT / out / q / "evidence.json"
        if not path.is_file():
            rows.append(f"| {q} | not run ({path} is missing) | | | | |")
            continue
        ev = load_evidence(path)
        ident = ev.identity
        identity = (
            f"{ident.checked - ident.mismatches - ident.near_ties} of {ident.checked} turns identical"
            + (f", {ident.near_ties} near-ties" if ident.near_ties else "")
            + (f", **{ident.mismatches} mismatches**" if ident.mismatches else "")
        )
        for m in ev.methods:
            res = ev.results[m.name]
            cell = res.scopes[OVERALL]
            tau = res.tau_mean_of_datasets
            tau_text = "1.00" if m.plain else f"{tau.value:.2f} ({tau.low:.2f} to {tau.high:.2f})"
            rows.append(
                f"| {q} | {m.short} | {tau_text} | ×{cell.speedup.mean:.2f} | {cell.tokens_per_s.mean:.1f} | "
                f"{'' if m.plain else identity} |"
            )
    return "\n".join(rows)


def bench_command(args: argparse.Namespace, extra: list[str], out: str | None = None) -> list[str]:
    s = SETTINGS[args.settings]
    eval_files = sorted(f"../shared/data/eval/{p.name}" for p in (ROOT.parent / "shared/data/eval").glob("*.jsonl"))
    if not eval_files:
        raise SystemExit(f"error: no evaluation sets found ({EVAL_GLOB} beside the repository).")
    return [
        sys.executable,
        "-m",
        "poss_core.bench",
        "--preset",
        args.preset,
        "--methods",
        args.methods or s["methods"],
        "--data",
        *eval_files,
        "--limit",
        str(args.limit or s["limit"]),
        "--max-new-tokens",
        str(args.max_new_tokens or s["max_new_tokens"]),
        *s["flags"],
        "--threads",
        str(args.threads),
        "--out",
        out or args.out or f"results/{args.settings}",
        *extra,
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(
        prog="python scripts/benchmark.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("settings", choices=list(SETTINGS))
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument(
        "--drafts", default=None, help="a folder with one subfolder per method (default: the bundled drafts)"
    )
    p.add_argument(
        "--methods",
        default=None,
        help="comma-separated (default: " + "; ".join(f"{k}: {v['methods']}" for k, v in SETTINGS.items()) + ")",
    )
    p.add_argument(
        "--limit", type=int, default=None, help="questions per dataset (paper 3, auto 2, demo 3, quantized 2)"
    )
    p.add_argument("--max-new-tokens", type=int, default=None, help="new tokens per answer (64)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--quantization",
        default=None,
        help="quantized only: which modes to (re)run, comma-separated (default none,8bit,4bit); the table "
        "reads every mode's folder",
    )
    p.add_argument("--out", default=None, help="results folder (default results/SETTINGS)")
    p.add_argument(
        "--evidence",
        action="store_true",
        help="after the run, write its evidence summary to assets/evidence/PRESET.json (the app's Evidence tab)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the command without running it")
    args = p.parse_args(argv)
    benches = bench_commands(args, extra)
    env = dict(os.environ)
    if args.drafts:
        if not Path(args.drafts).is_dir():
            raise SystemExit(f"error: --drafts {args.drafts} is not a folder.")
        env["POSS_DRAFTS_DIR"] = args.drafts
    commands = benches + ([evidence_command(args, benches[-1])] if args.evidence else [])
    for c in commands:
        print(
            ("POSS_DRAFTS_DIR=" + args.drafts + " " if args.drafts else "")
            + " ".join("python" if part == sys.executable else part for part in c),
            flush=True,
        )
    if args.dry_run:
        return 0
    worst = 0
    for c in commands:
        rc = subprocess.call(c, env=env, cwd=ROOT)
        # A failed identity check (3) is a finding: the other quantization modes still run and the table shows it.
        if rc != 0 and not (rc == 3 and args.settings == "quantized"):
            return rc
        worst = max(worst, rc)
    if args.settings == "quantized":
        print(quantized_table(args.out or "results/quantized"))
    return worst


def evidence_command(args: argparse.Namespace, bench: list[str]) -> list[str]:
    """The evidence summary of the run `bench` writes, into assets/evidence/PRESET.json."""
    out = bench[len(bench) - bench[::-1].index("--out")]  # the last --out (one after `--` overrides)
    name = f"{args.preset}-demo" if args.settings == "demo" else args.preset
    return [sys.executable, "-m", "poss_core.bench", "evidence", out, "--out", f"assets/evidence/{name}.json"]


if __name__ == "__main__":
    sys.exit(main())
