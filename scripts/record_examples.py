"""Record the Demo tab's examples: one run of the default lanes (plain, EAGLE, POSS-2) per example prompt, with the
app's default settings for the preset, saved in the saved-run format (poss_core/runtime/saved_runs.py, compact floats,
gzip-compressed) as assets/recordings/PRESET/NN-FAMILY.jsonl.gz. Clicking an example in the app replays its
recording at once, at the speed it was recorded, labelled with the hardware written here (the CPU's model name and
threads, dtype, date and --note): each lane's header says which machine made it.

    nice -n 19 python scripts/record_examples.py                     # smollm2-135m, bf16 where the CPU has bf16 units
    python scripts/record_examples.py --preset tiny-random --out /tmp/rec --max-new-tokens 16
    python scripts/record_examples.py --note "the other core was busy training" --only 1,3

Each recording is checked by loading it back (the app's own loader) before the next one starts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_parser() -> argparse.ArgumentParser:
    from poss_core.models.presets import DEFAULT_PRESET, presets

    p = argparse.ArgumentParser(prog="python scripts/record_examples.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default=DEFAULT_PRESET, choices=list(presets()), help=f"default {DEFAULT_PRESET}")
    p.add_argument("--out", type=Path, default=None, help="folder of recordings (default assets/recordings)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default: the app's slider default (160)")
    p.add_argument(
        "--dtype",
        default="auto",
        help="the target's precision, as `python app.py --dtype` (auto: what the app starts with here, "
        "bfloat16 on a CPU with bf16 units)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: as the app, half the cores)")
    p.add_argument("--note", default="", help="a few words on the machine's state, shown with the recording")
    p.add_argument("--only", default="", help="comma-separated example numbers (1-based) to record; default all")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import torch
    from tqdm import tqdm

    from app.page.launch import cpu_threads
    from app.sessions.machine import cpu_name
    from app.sessions.recordings import EXAMPLES, RECORDINGS_DIR, recording_path
    from app.sessions.state import default_lanes
    from app.views.control_defaults import initial_precision, ui_defaults
    from poss_core.base.errors import PossError
    from poss_core.models.hardware import cpu_bf16_units, cuda_available
    from poss_core.models.presets import get_preset
    from poss_core.runtime import compare, saved_runs

    torch.set_num_threads(cpu_threads(args.threads))
    preset = get_preset(args.preset)
    d = ui_defaults(preset)
    precision = initial_precision(args.dtype, cuda_available(), cpu_bf16_units())
    lanes = default_lanes(preset)
    chosen = [int(x) - 1 for x in args.only.split(",") if x.strip()] or list(range(len(EXAMPLES)))
    bad = [i + 1 for i in chosen if not 0 <= i < len(EXAMPLES)]
    if bad:
        print(f"error: --only {bad}: the examples are numbered 1 to {len(EXAMPLES)}.", file=sys.stderr)
        return 2
    folder = args.out or RECORDINGS_DIR
    hardware_extra = {
        "cpu": f"{cpu_name()}, {torch.get_num_threads()} thread{'s' if torch.get_num_threads() != 1 else ''}",
        "recorded": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    if args.note:
        hardware_extra["note"] = args.note[:200]
    total = 0
    try:
        for i in tqdm(chosen, desc=f"recording {args.preset}", unit="example"):
            spec = compare.RunSpec(
                EXAMPLES[i]["prompt"],
                lanes,
                args.preset,
                depth=d["depth"],
                top_k=d["top_k"],
                tree_budget=d["tree_budget"],
                max_new_tokens=args.max_new_tokens or d["max_new_tokens"],
                precision=precision,
            )
            comp = compare.run_to_end(compare.start(spec.resolve()))
            comp.hardware = {**comp.hardware, **hardware_extra}
            path = saved_runs.save_run(comp, recording_path(i, args.preset, folder), compact=True)
            saved_runs.load_run(path)  # the app's loader accepts it
            total += path.stat().st_size
            tqdm.write(
                f"  {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
                f"{path.stat().st_size / 1024:.0f} KB, "
                + ", ".join(f"{lane.short} {len(lane.token_ids)} tokens" for lane in comp.lanes)
            )
    except PossError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{len(chosen)} recording(s), {total / 1024:.0f} KB in all, in {folder}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
