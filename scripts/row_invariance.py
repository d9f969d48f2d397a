"""Whether a target gives a row the same bits alone (plain decoding's one-row steps), in steps of 2 to 16 rows, in
prompt chunks and as a draft-tree node among siblings: one line per case, rows bit-identical and the largest logit
difference. Exit status 1 when any case differs, so a GPU run answers "is bf16 identity exact here?" on its own.

    python scripts/row_invariance.py [--preset smollm2-135m] [--dtype bfloat16] [--attention row-invariant|sdpa]
        [--device cuda] [--length 150 --prefix 101] [--json FILE]

On this project's 2-core CPU every case is exact with row-invariant attention in float32, bfloat16 and float16;
with --attention sdpa the one-row steps and the trees are not (docs/results.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from poss_core.models.hardware import device_description  # noqa: E402
from poss_core.models.invariance import invariance  # noqa: E402
from poss_core.models.loading import load_preset_target, parse_dtype  # noqa: E402
from poss_core.models.presets import DEFAULT_PRESET, get_preset  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--attention", choices=["row-invariant", "sdpa"], default="row-invariant")
    p.add_argument("--device", default=None)
    p.add_argument("--length", type=int, default=150)
    p.add_argument("--prefix", type=int, default=101)
    p.add_argument("--json", default=None, help="also write the cases here")
    args = p.parse_args(argv)
    os.environ["POSS_ATTENTION"] = args.attention  # read by the TargetModel the loader builds
    target = load_preset_target(
        get_preset(args.preset).target, quantization="none", device=args.device, dtype=parse_dtype(args.dtype)
    )
    cases = invariance(target, length=args.length, prefix=args.prefix)
    where = device_description(target.device)
    print(f"{args.preset}, {args.dtype}, {args.attention} attention, {where}")
    for c in cases:
        print(f"{c.name:<34} {c.equal:>4}/{c.rows:<4} bit-identical   max |diff| {c.max_diff:.3g}")
    exact = all(c.exact for c in cases)
    print(f"row invariance: {'EXACT' if exact else 'NOT exact'} ({sum(c.exact for c in cases)}/{len(cases)} cases)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        record = {"preset": args.preset, "dtype": args.dtype, "attention": args.attention, "device": where}
        Path(args.json).write_text(json.dumps({**record, "cases": [asdict(c) for c in cases]}, indent=1))
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
