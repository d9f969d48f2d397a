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
    _store_flags(p)
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
        "--results-dir",
        default=None,
        help="a folder the Evidence tab's path box may read results from, besides the project's results/ "
        "(default: $POSS_RESULTS_DIR)",
    )
    p.add_argument(
        "--no-preload",
        action="store_true",
        help="do not load the preset's model in the background at start-up (the first Run loads it)",
    )


def _defaults():
    """The limits a server holds visitors to without flags (their holders' own defaults, app/server/limits.py)."""
    from app.server.limits import ServerLimits

    return ServerLimits()


def _call_flags(p: argparse.ArgumentParser) -> None:
    """What one call, one tab and one address may ask for, and the line of live runs."""
    d = _defaults()
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="live runs decoding at once; more wait in line, each told its place and the estimated wait "
        "(default: half the cores over --threads, at least 1: one on a 2-vCPU Space)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=int(os.environ.get("POSS_MAX_NEW_TOKENS", "0")) or None,
        help="the most new tokens one live run may ask for (default: 256 on a machine without a GPU, so "
        "that a class on a free Space gets its turns; the settings' bound, 2048, with one; also "
        "POSS_MAX_NEW_TOKENS)",
    )
    p.add_argument(
        "--class-reset-key",
        default=os.environ.get("POSS_CLASS_RESET_KEY") or None,
        help="a key that lets whoever knows it reset the class's pooled charts (\"everyone on this "
        'server") from the Demo tab; without one they cannot be reset but by a restart (also '
        "POSS_CLASS_RESET_KEY, e.g. a Space secret)",
    )
    p.add_argument(
        "--max-call-seconds",
        type=float,
        default=d.call_s,
        help="the most seconds one Run, Replay or /compare call decodes before it is stopped (default 300)",
    )
    p.add_argument(
        "--no-call-fits",
        action="store_true",
        default=os.environ.get("POSS_NO_CALL_FITS") == "1",
        help="a Run or /compare call never starts a tree-budget fit: auto budgets come only from the fits "
        "made at start-up (or cached on disk), else the lane uses the default budget and says so "
        "(for a public server, also POSS_NO_CALL_FITS=1; without it a call may fit, within "
        "--max-call-seconds)",
    )
    p.add_argument(
        "--queue-size",
        type=int,
        default=d.queue_size,
        help="most requests waiting in Gradio's queue, and most live runs waiting for a slot (default 64)",
    )
    p.add_argument(
        "--max-calls-per-client",
        type=int,
        default=d.per_client,
        help="decoding calls (Run, Step, Replay, /compare) one tab or API client may have waiting or "
        "running at once; more are refused with a message (default 2)",
    )
    p.add_argument(
        "--max-calls-per-address",
        type=int,
        default=d.per_address,
        help="the same per client address (see --proxy-hops; 0: no limit). The "
        "default, 40, lets a class of thirty behind one NAT run at once; the line of live runs serves "
        "addresses in turn, then tabs, so one address's many calls do not delay the others",
    )
    p.add_argument(
        "--proxy-hops",
        type=int,
        default=None,
        help="trusted proxies in front of the app that append the client's address to X-Forwarded-For: the client "
        "is the entry this many places from the right, never one the client wrote; 0 ignores the header (default: "
        "1 on a Hugging Face Space, whose router appends it, 0 elsewhere; also POSS_PROXY_HOPS)",
    )


def _store_flags(p: argparse.ArgumentParser) -> None:
    """What the server keeps: Gradio's cache on disk, saved runs, idle tabs and the memory total."""
    d, mb = _defaults(), 2**20
    p.add_argument(
        "--cache-minutes",
        type=float,
        default=d.cache_age_s / 60,
        help="uploads and downloads in Gradio's cache are deleted once this old (default 10)",
    )
    p.add_argument(
        "--saved-run-minutes",
        type=float,
        default=float(os.environ.get("POSS_SAVED_RUN_MINUTES") or d.saved_run_s / 60),
        help="a saved run belongs to its tab: kept while the tab is open and this many minutes after (and at least "
        "this long after it was saved), whatever other visitors save, load or upload; a tab keeps its newest 4 "
        "(default 10; also POSS_SAVED_RUN_MINUTES)",
    )
    p.add_argument(
        "--disk-cap-mb",
        type=float,
        default=float(os.environ.get("POSS_DISK_CAP_MB") or d.disk_cap_bytes / mb),
        help="the most MB Gradio's cache (uploads, saved runs, Gradio's copies of outputs, temporary files) may "
        "hold: past it the oldest files are deleted, and an upload that does not fit is refused (default 2048: "
        "a free Space's disk is about 50 GB, and 2 GB holds over a hundred of the largest saved runs; also "
        "POSS_DISK_CAP_MB)",
    )
    p.add_argument(
        "--upload-mb-per-second",
        type=float,
        default=float(os.environ.get("POSS_UPLOAD_MB_PER_SECOND") or d.upload_bytes_per_s / mb),
        help="uploads one client address may send, MB per second, after a burst of 64 MB (four of the largest "
        "saved runs; default 2: a class behind one address uploads its runs at once, while one address alone "
        "writes at most about 1.3 GB in a 10-minute cache age, under the cap; also POSS_UPLOAD_MB_PER_SECOND)",
    )
    p.add_argument(
        "--idle-minutes",
        type=float,
        default=d.idle_s / 60,
        help="a tab idle this long has its paused Step ended and the runs it holds freed (default 10)",
    )
    p.add_argument(
        "--session-memory-mb",
        type=float,
        default=float(os.environ.get("POSS_SESSION_MEMORY_MB") or d.memory_mb),
        help="the memory total: what every tab together may hold (paused Steps with their caches, finished and "
        "loaded runs, pooled rounds; past it the least recently used tab's are freed and the tab is told why), and "
        "the models kept loaded (targets of other precisions or quantizations are let go past it, all but the one in "
        "use; a target that alone needs more is refused) (default 4096, sized for a 16 GB Space; also "
        "POSS_SESSION_MEMORY_MB)",
    )


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


def proxy_hops(requested: int | None) -> int:
    """--proxy-hops, else $POSS_PROXY_HOPS, else one on a Space and none elsewhere (client_share.PROXY_HOPS)."""
    from app.server import client_share

    if requested is not None:
        return requested
    env = os.environ.get("POSS_PROXY_HOPS", "")
    return int(env) if env.strip().isdigit() else client_share.PROXY_HOPS


def cpu_threads(requested: int | None) -> int:
    return requested if requested and requested > 0 else max(1, (os.cpu_count() or 2) // 2)


CPU_MAX_NEW_TOKENS = 256  # a live run's most new tokens on a machine without a GPU (three lanes: about a minute)


def max_new_tokens(requested: int | None, gpu: bool) -> int:
    """The most new tokens one live run may ask for: --max-new-tokens, else CPU_MAX_NEW_TOKENS without a GPU and the
    settings' own bound with one."""
    from poss_core.base.settings import LIMITS

    top = int(LIMITS["max_new_tokens"][1])
    if requested:
        return requested
    return top if gpu else min(top, CPU_MAX_NEW_TOKENS)


def start_disk_budget(demo) -> None:
    """Sweep Gradio's cache folder under the installed limits' cap (`disk_budget.BUDGET`, by age and size in a daemon
    thread, a flood's own files first) and keep each tab's saved runs for it (`file_owners.OWNERS`: while the tab
    lives and --saved-run-minutes after, by this sweep and Gradio's own)."""
    from gradio.utils import get_upload_folder

    from app.actions import saved_files
    from app.server import disk_budget, file_owners, limits
    from app.sessions import state

    owners = file_owners.OWNERS
    owners.tab_seen, owners.idle_s = state.SESSIONS.last_seen, lambda: state.SESSIONS.idle_s
    saved_files.protect_saved_runs(demo)
    budget = disk_budget.BUDGET
    budget.folder = Path(get_upload_folder()).resolve()
    # Files a component keeps for good (Gradio's keep_in_cache, with the protected saved runs) count against the cap
    # but are never deleted.
    budget.keep = lambda: {p for block in demo.blocks.values() for p in getattr(block, "keep_in_cache", ())}
    budget.address_of = owners.address_of
    budget.start()
    server = limits.LIMITS
    print(
        f"[poss] disk: Gradio's cache capped at {server.disk_cap_bytes / 2**20:.0f} MB, uploads "
        f"{server.upload_bytes_per_s / 2**20:g} MB/s per address, saved runs kept {server.saved_run_s / 60:g} "
        f"minutes past their tab",
        file=sys.stderr,
        flush=True,
    )


def check_flags(args: argparse.Namespace) -> None:
    """Refuse flags out of their bounds, with the flag and what to use (argparse's error: exit status 2)."""
    from poss_core.base.settings import LIMITS

    for flag, value in (
        ("--max-call-seconds", args.max_call_seconds),
        ("--cache-minutes", args.cache_minutes),
        ("--idle-minutes", args.idle_minutes),
        ("--saved-run-minutes", args.saved_run_minutes),
        ("--session-memory-mb", args.session_memory_mb),
        ("--upload-mb-per-second", args.upload_mb_per_second),
    ):
        if not 0 < value < float("inf"):
            build_parser().error(f"{flag}={value}: use a number > 0.")
    for flag, value in (
        ("--max-calls-per-client", args.max_calls_per_client),
        ("--max-calls-per-address", args.max_calls_per_address),
        ("--proxy-hops", 0 if args.proxy_hops is None else args.proxy_hops),
    ):
        if value < 0 or (flag == "--max-calls-per-client" and value < 1):
            build_parser().error(f"{flag}={value}: use a whole number >= {1 if 'client' in flag else 0}.")
    top = int(LIMITS["max_new_tokens"][1])
    for flag, value, most in (
        ("--concurrency", args.concurrency, 64),
        ("--max-new-tokens", args.max_new_tokens, top),
        ("--queue-size", args.queue_size, 10_000),
    ):
        if value is not None and not 1 <= value <= most:
            build_parser().error(f"{flag}={value}: use a whole number from 1 to {most}.")
    if not 64 <= args.disk_cap_mb < float("inf"):  # the cap must hold at least one burst of uploads
        build_parser().error(f"--disk-cap-mb={args.disk_cap_mb}: use a number >= 64.")


def server_limits(args: argparse.Namespace):
    """The limits the flags ask for, with this machine's defaults where a flag is not given."""
    from app.server import limits, live_queue
    from poss_core.models.hardware import cuda_available

    slots = args.concurrency or live_queue.auto_slots(os.cpu_count(), cpu_threads(args.threads))
    return limits.ServerLimits.from_args(
        args, slots, max_new_tokens(args.max_new_tokens, cuda_available()), proxy_hops(args.proxy_hops)
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
    start_disk_budget(demo)
    server_text.install()  # a call Gradio refuses on its inputs: one log line, not a trace echoing its values
    if not args.no_preload:
        prepare_target(args.preset)  # before the page is up: its first Run then only loads a prepared checkpoint
        threading.Thread(target=preload, args=(args.preset, precision), daemon=True, name="poss-preload").start()
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, **launch_kwargs(demo))
