"""Launch the demo: flags, the start-up work (prepare the target, load it and fit tree budgets in the background),
build the Gradio app and serve it. `python app.py` (the Space's app_file) and the `poss-demo` console script run
`main`."""

from __future__ import annotations

try:  # ZeroGPU Spaces: `spaces` must be imported before anything initialises CUDA
    import spaces  # type: ignore  # noqa: F401
except ImportError:
    spaces = None

import argparse
import os
import sys
import threading
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    """`python app.py`'s flags."""
    p = argparse.ArgumentParser(prog="python app.py", description="POSS vs EAGLE speculative decoding demo (Gradio).")
    _serving_flags(p)
    _call_flags(p)
    return p


def _serving_flags(p: argparse.ArgumentParser) -> None:
    """What is served and how: the preset, the address, the attention, threads, precision, results, preloading."""
    from poss_core.models.loading import add_dtype_argument
    from poss_core.models.presets import DEFAULT_PRESET, presets

    p.add_argument(
        "--preset",
        default=os.environ.get("POSS_PRESET", DEFAULT_PRESET),
        choices=list(presets()),
        help=f"model preset shown first (default {DEFAULT_PRESET}: runs offline on a CPU)",
    )
    p.add_argument(
        "--host",
        default=None,
        help="interface to listen on (default 127.0.0.1, or $GRADIO_SERVER_NAME; 0.0.0.0 for a LAN)",
    )
    p.add_argument("--port", type=int, default=None, help="port (default 7860, or $GRADIO_SERVER_PORT)")
    p.add_argument(
        "--attention",
        choices=["row-invariant", "sdpa"],
        default=None,
        help="the target's attention: row-invariant (default on a CPU: every lane identical to plain decoding in "
        "every precision) or transformers' sdpa (more tokens/s, bf16 lanes may part at rounding near-ties; also "
        "POSS_ATTENTION)",
    )
    p.add_argument("--share", action="store_true", help="also open a public gradio.live link (off by default)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: half the cores, at least 1, which leaves a core to the web "
        "server and the drawing; on a busy CPU it is also far faster than oversubscribing)",
    )
    add_dtype_argument(
        p,
        "the Precision setting's initial value (the target's dtype for every lane)",
        default=os.environ.get("POSS_DTYPE", "auto"),
    )
    p.add_argument(
        "--no-preload",
        action="store_true",
        help="do not load the preset's model in the background at start-up (the first Run loads it)",
    )


def _call_flags(p: argparse.ArgumentParser) -> None:
    """What one call, one tab and one address may ask for, the line of live runs, and what the server keeps: each
    flag made from its limit's one declaration (app/server/limits.py)."""
    from app.server import limits

    for group, title in (("calls", "one call and the line"), ("shares", "tabs and addresses"), ("store", "storage")):
        limits.add_flags(p.add_argument_group(title), group)


def preload(preset_name: str, precision: str = "auto") -> None:
    """Load the target and the default lanes' drafts before anyone presses Run, so the first comparison is quick,
    then fit their auto tree budgets to this machine (a Run meanwhile starts on the default budgets)."""
    from app.sessions.state import default_lanes
    from app.views.control_defaults import ui_defaults
    from poss_core.base.errors import PossError
    from poss_core.models.hardware import cuda_available
    from poss_core.models.presets import get_preset
    from poss_core.runtime import compare
    from poss_core.runtime.model_cache import MODELS

    preset = get_preset(preset_name)
    if preset.device == "gpu" and not cuda_available():
        return
    MODELS.startup_fit.set()  # from now until the fits are done, a Run starts on the default budgets
    try:
        print(f"[poss] loading {preset_name} in the background ...", file=sys.stderr, flush=True)
        methods = default_lanes(preset)
        # A two-token comparison loads the drafts and warms up the kernels, so the first real Run starts at once.
        compare.run_to_end(
            compare.start(
                compare.RunSpec("Hello", methods, preset_name, max_new_tokens=2, precision=precision).resolve()
            )
        )
        print(f"[poss] {preset_name} ready; fitting the default lanes' tree budgets ...", file=sys.stderr, flush=True)
        d = ui_defaults(preset)
        compare.prefit_budgets(
            compare.RunSpec(
                "Hello",
                methods,
                preset_name,
                depth=d["depth"],
                top_k=d["top_k"],
                tree_budget=d["tree_budget"],
                precision=precision,
                auto_budget=True,
            ).resolve()
        )
        print(f"[poss] {preset_name}: tree budgets fitted.", file=sys.stderr, flush=True)
    except PossError as err:  # the UI shows the same message when someone presses Run
        print(f"[poss] could not preload {preset_name}: {err}", file=sys.stderr, flush=True)
    finally:
        MODELS.startup_fit.clear()


def prepare_target(preset_name: str) -> None:
    """Turn the default target's GGUF into a checkpoint (once per cache, about 20 s) before serving, so the page
    never comes up with a first Run that would wait for it (what a new Space would otherwise do)."""
    from poss_core.base.errors import PossError
    from poss_core.models.presets import get_preset

    if get_preset(preset_name).target != "builtin:smollm2-135m":
        return
    from poss_core.models.default_model import prepare_default_model

    try:
        prepare_default_model()
    except PossError as err:  # the UI shows the same message when someone presses Run
        print(f"[poss] could not prepare {preset_name}: {err}", file=sys.stderr, flush=True)


def cpu_threads(requested: int | None) -> int:
    return requested if requested and requested > 0 else max(1, (os.cpu_count() or 2) // 2)


def max_new_tokens(gpu: bool) -> int:
    """The most new tokens one live run may ask for without --max-new-tokens: the settings' own bound with a GPU,
    limits.CPU_MAX_NEW_TOKENS without one."""
    from app.server.limits import CPU_MAX_NEW_TOKENS, MOST_NEW_TOKENS

    return MOST_NEW_TOKENS if gpu else min(MOST_NEW_TOKENS, CPU_MAX_NEW_TOKENS)


def start_disk_cap(demo) -> None:
    """Sweep Gradio's cache folder under the installed limits' cap (`disk_cap.DISK`, by age and size in a daemon
    thread, a flood's own files first) and keep each tab's saved runs for it (`file_owners.OWNERS`: while the tab
    lives and --saved-run-minutes after, by this sweep and Gradio's own)."""
    from gradio.utils import get_upload_folder

    from app.actions import saved_files
    from app.server import disk_cap, file_owners, limits
    from app.sessions import state

    owners = file_owners.OWNERS
    owners.tab_seen, owners.idle_s = state.SESSIONS.last_seen, lambda: state.SESSIONS.idle_s
    saved_files.protect_saved_runs(demo)
    disk = disk_cap.DISK
    disk.folder = Path(get_upload_folder()).resolve()
    # Files a component keeps for good (Gradio's keep_in_cache, with the protected saved runs) count against the cap
    # but are never deleted.
    disk.keep = lambda: {p for block in demo.blocks.values() for p in getattr(block, "keep_in_cache", ())}
    disk.address_of = owners.address_of
    disk.start()
    server = limits.LIMITS
    print(
        f"[poss] disk: Gradio's cache capped at {server.disk_cap_bytes / 2**20:.0f} MB, uploads "
        f"{server.upload_bytes_per_s / 2**20:g} MB/s per address, saved runs kept {server.saved_run_s / 60:g} "
        f"minutes past their tab",
        file=sys.stderr,
        flush=True,
    )


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flags out of their declared bounds, with the flag and what to use (argparse's error: exit status 2)."""
    from app.server import limits

    wrong = limits.check_args(args)
    if wrong:
        build_parser().error(" ".join(wrong))


def server_limits(args: argparse.Namespace):
    """The limits the flags ask for, with this machine's defaults where a flag is not given."""
    from app.server import limits, live_queue
    from poss_core.models.hardware import cuda_available

    return limits.ServerLimits.from_args(
        args,
        slots=live_queue.auto_slots(os.cpu_count(), cpu_threads(args.threads)),
        max_new_tokens=max_new_tokens(cuda_available()),
    )


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.attention:  # read by every TargetModel the app loads (models/row_invariant.use_attention)
        os.environ["POSS_ATTENTION"] = args.attention
    import torch

    torch.set_num_threads(cpu_threads(args.threads))
    from app.page.serving import launch_kwargs
    from app.page.ui import build_demo
    from app.server import limits, server_text
    from app.views.control_defaults import initial_precision
    from poss_core.models.hardware import cpu_bf16_units, cuda_available

    precision = initial_precision(args.dtype, cuda_available(), cpu_bf16_units())
    check_flags(args)
    server = server_limits(args)
    print(limits.summary(server), file=sys.stderr, flush=True)
    demo = build_demo(args.preset, precision, server)  # installs the limits
    demo.queue(max_size=server.queue_size, default_concurrency_limit=server.slots)
    start_disk_cap(demo)
    server_text.install()  # a call Gradio refuses on its inputs: one log line, not a trace echoing its values
    if not args.no_preload:
        prepare_target(args.preset)  # before the page is up: its first Run then only loads a prepared checkpoint
        threading.Thread(target=preload, args=(args.preset, precision), daemon=True, name="poss-preload").start()
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, **launch_kwargs(demo))
