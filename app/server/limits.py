"""Every limit the server holds a call, a tab or an address to, declared once: a field of `ServerLimits` with its
default, its `python app.py` flag, the flag's unit and help. The flag, its environment variable (`POSS_` and the flag
in capitals: `--disk-cap-mb` is `POSS_DISK_CAP_MB`), its help with the real default and its bounds check are all made
from that one declaration (`add_flags`, `from_args`, `check_args`). The holders (the line of live runs, the shares,
the disk, the saved runs' owners, the class pool, the sessions, the model cache) start from `DEFAULTS` and get a
server's own values from `server_state.install`; the handlers read `LIMITS`."""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any

from poss_core.base import settings

MB = 2**20
CPU_MAX_NEW_TOKENS = 256  # a live run's most new tokens without a GPU, so that a class on a free Space gets its turns
MOST_NEW_TOKENS = int(settings.BOUNDS["max_new_tokens"][1])  # the setting's own bound


@dataclass(frozen=True)
class Flag:
    """How one limit is set from the command line: `--name VALUE` in `unit`, times `scale` to the field's unit."""

    name: str  # the flag, without its dashes
    help: str  # what it limits; the default and the environment variable are appended
    unit: str = ""  # the flag's unit, shown in its default ("10 minutes")
    scale: float = 1.0  # field value = flag value * scale (minutes to seconds: 60)
    low: float | None = None  # the least value allowed (inclusive)
    above: float | None = None  # values must be greater than this
    high: float | None = None  # the most value allowed (inclusive)
    default_text: str | None = None  # what the default is where it depends on the machine
    switch: bool = False  # a flag without a value that turns the field off (`--no-call-fits`)
    group: str = "calls"  # the help section: calls, shares or store

    @property
    def env(self) -> str:
        return "POSS_" + self.name.upper().replace("-", "_")

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


def limit(default: Any, flag: Flag) -> Any:
    """A ServerLimits field: its default (a function is called for it, at each ServerLimits()) and its flag."""
    if callable(default):
        return field(default_factory=default, metadata={"flag": flag})
    return field(default=default, metadata={"flag": flag})


def _space_hops() -> int:
    """Proxies in front of the app that append to X-Forwarded-For: one on a Hugging Face Space (its router), none
    when run locally."""
    return 1 if os.environ.get("SPACE_ID") else 0


@dataclass(frozen=True)
class ServerLimits:
    # --- one call and the line of live runs
    call_s: float = limit(
        300.0,
        Flag(
            "max-call-seconds",
            "the most seconds one Run, Replay or /compare call decodes before it is stopped",
            "seconds",
            above=0,
        ),
    )
    call_fits: bool = limit(
        True,
        Flag(
            "no-call-fits",
            "a Run or /compare call never starts a tree-budget fit: auto budgets come only from the "
            "fits made at start-up (or cached on disk), else the lane uses the default budget and says so (for a "
            "public server; without it a call may fit, within --max-call-seconds)",
            switch=True,
        ),
    )
    max_new_tokens: int | None = limit(
        None,
        Flag(
            "max-new-tokens",
            "the most new tokens one live run may ask for",
            "tokens",
            low=1,
            high=MOST_NEW_TOKENS,
            default_text=f"{CPU_MAX_NEW_TOKENS} on a machine without a GPU, so that a class on a free Space gets its "
            f"turns; the settings' bound, {MOST_NEW_TOKENS}, with one",
        ),
    )
    slots: int = limit(
        2,  # a server built without flags (tests, build_demo); `python app.py` sizes it to the machine
        Flag(
            "concurrency",
            "live runs decoding at once; more wait in line, each told its place and the estimated wait",
            "runs",
            low=1,
            high=64,
            default_text="half the cores over --threads, at least 1: one on a 2-vCPU Space",
        ),
    )
    queue_size: int = limit(
        64,
        Flag(
            "queue-size",
            "most requests waiting in Gradio's queue, and most live runs waiting for a slot",
            "requests",
            low=1,
            high=10_000,
        ),
    )
    replay_concurrency: int = limit(
        16,
        Flag(
            "replay-concurrency",
            "replays (the examples' recordings, Replay) drawn at once; no model work, so a "
            "class's replays go quickly, and a quarter of --queue-size keeps replays alone from filling the line",
            "replays",
            low=1,
            high=1_000,
        ),
    )
    # --- what one tab and one address may hold
    per_client: int = limit(
        2,
        Flag(
            "max-calls-per-client",
            "decoding calls (Run, Step, Replay, /compare) one tab or API client may have "
            "waiting or running at once; more are refused with a message",
            "calls",
            low=1,
            group="shares",
        ),
    )
    per_address: int = limit(
        40,
        Flag(
            "max-calls-per-address",
            "the same per client address (see --proxy-hops; 0: no limit); 40 lets a "
            "class of thirty behind one NAT run at once, and the line serves addresses in turn, then tabs",
            "calls",
            low=0,
            group="shares",
        ),
    )
    light_per_client: int = limit(
        8,
        Flag(
            "max-light-per-client",
            "light events (a page load, a view toggle, a slider, Stop, Save, an example's "
            "replay) one tab may have waiting or unread at once; each holds its reply until it is read",
            "events",
            low=1,
            group="shares",
        ),
    )
    light_per_address: int = limit(
        160,
        Flag(
            "max-light-per-address",
            "the same per client address: a class behind one NAT opens thirty pages together",
            "events",
            low=1,
            group="shares",
        ),
    )
    pages_per_address: int = limit(
        160,
        Flag(
            "max-pages-per-address",
            "open pages one client address may hold: a class of thirty behind one NAT, several tabs each",
            "pages",
            low=1,
            group="shares",
        ),
    )
    class_runs_per_address: int = limit(
        200,
        Flag(
            "class-runs-per-address",
            "runs one address may add to the class's pooled charts until they are reset",
            "runs",
            low=1,
            group="shares",
        ),
    )
    body_bytes: int = limit(
        MB,
        Flag(
            "max-body-mb",
            "the largest request body but an upload's (a prompt at its 32 kB bound escaped in JSON "
            "takes far less); larger ones get 413",
            "MB",
            scale=MB,
            above=0,
            high=64,
            group="shares",
        ),
    )
    proxy_hops: int = limit(
        _space_hops,
        Flag(
            "proxy-hops",
            "trusted proxies in front of the app that append the client's address to X-Forwarded-For: "
            "the client is the entry this many places from the right, never one the client wrote; 0 ignores the "
            "header",
            "proxies",
            low=0,
            group="shares",
            default_text="1 on a Hugging Face Space, whose router appends it, 0 elsewhere",
        ),
    )
    class_reset_key: str | None = limit(
        None,
        Flag(
            "class-reset-key",
            "a key that lets whoever knows it reset the class's pooled charts (\"everyone on "
            'this server") from the Demo tab; without one they cannot be reset but by a restart (e.g. a Space '
            "secret)",
            group="shares",
            default_text="none",
        ),
    )
    # --- what the server keeps
    cache_age_s: float = limit(
        600.0,
        Flag(
            "cache-minutes",
            "uploads and downloads in Gradio's cache are deleted once this old",
            "minutes",
            scale=60.0,
            above=0,
            group="store",
        ),
    )
    disk_cap_bytes: int = limit(
        2048 * MB,
        Flag(
            "disk-cap-mb",
            "the most Gradio's cache (uploads, saved runs, Gradio's copies of outputs, temporary "
            "files) may hold: past it the oldest files are deleted, and an upload that does not fit is refused (a "
            "free Space's disk is about 50 GB; 2 GB holds over a hundred of the largest saved runs; at least one "
            "burst of uploads)",
            "MB",
            scale=MB,
            low=64,
            group="store",
        ),
    )
    upload_bytes_per_s: float = limit(
        2.0 * MB,
        Flag(
            "upload-mb-per-second",
            "uploads one client address may send after a burst of 64 MB (four of the "
            "largest saved runs): a class behind one address uploads its runs at once, while one address alone "
            "writes at most about 1.3 GB in a 10-minute cache age, under the cap",
            "MB/s",
            scale=MB,
            above=0,
            group="store",
        ),
    )
    saved_run_s: float = limit(
        600.0,
        Flag(
            "saved-run-minutes",
            "a saved run belongs to its tab: kept while the tab is open and this long after "
            "(and at least this long after it was saved), whatever other visitors save, load or upload; a tab keeps "
            "its newest 4",
            "minutes",
            scale=60.0,
            above=0,
            group="store",
        ),
    )
    idle_s: float = limit(
        600.0,
        Flag(
            "idle-minutes",
            "a tab idle this long has its paused Step ended and the runs it holds freed",
            "minutes",
            scale=60.0,
            above=0,
            group="store",
        ),
    )
    memory_mb: float = limit(
        4096.0,
        Flag(
            "session-memory-mb",
            "the memory total: what every tab together may hold (paused Steps with their "
            "caches, finished and loaded runs, pooled rounds; past it the least recently used tab's are freed and "
            "the tab is told why), and the models kept loaded (targets of other precisions or quantizations are "
            "let go past it, all but the one in use; a target that alone needs more is refused); sized for a 16 GB "
            "Space",
            "MB",
            above=0,
            group="store",
        ),
    )
    results_dir: str | None = limit(
        None,
        Flag(
            "results-dir",
            "a folder the Evidence tab's path box may read results from, besides the project's results/",
            group="store",
            default_text="none",
        ),
    )

    @classmethod
    def from_args(cls, args: argparse.Namespace, **resolved: Any) -> ServerLimits:
        """The limits `python app.py`'s parsed flags ask for; `resolved` gives the machine-dependent ones
        (slots, max_new_tokens) their values where no flag set them."""
        values = {}
        for f, flag in declared():
            given = getattr(args, flag.dest, None)
            if flag.switch:
                values[f.name] = not given
            elif given is not None:
                values[f.name] = type_of(f)(given * flag.scale) if flag.scale != 1 else given
        for name, value in resolved.items():
            if values.get(name) is None:
                values[name] = value
        return cls(**values)


def declared() -> list[tuple[Any, Flag]]:
    """(dataclass field, flag) for every limit a flag sets, in declaration order."""
    return [(f, f.metadata["flag"]) for f in fields(ServerLimits) if f.metadata.get("flag")]


def type_of(f: Any) -> type:
    """The Python type a field's annotation names (int, float, str or bool; `X | None` is X)."""
    name = str(f.type).split("|")[0].strip()
    return {"int": int, "float": float, "str": str, "bool": bool}[name]


DEFAULTS = ServerLimits()
LIMITS = DEFAULTS


def _default_text(f: Any, flag: Flag) -> str:
    """The default as the flag's help states it, from the declaration."""
    if flag.default_text:
        return flag.default_text
    value = f.default / flag.scale
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{shown} {flag.unit}".strip()


def _flag_default(f: Any, flag: Flag) -> Any:
    """The flag's default: its environment variable if set (a switch is on when it is 1), else the declared default
    in the flag's unit (None where the machine decides it)."""
    raw = os.environ.get(flag.env)
    if flag.switch:
        return raw == "1"
    if raw is None or raw.strip() == "":
        if flag.default_text or f.default is None or not isinstance(f.default, int | float):
            return None
        return f.default / flag.scale if flag.scale != 1 else f.default
    kind = float if flag.scale != 1 else type_of(f)
    try:
        return kind(float(raw)) if kind is int else kind(raw)
    except ValueError:
        raise SystemExit(f"${flag.env}={raw!r}: use a {kind.__name__}, as --{flag.name} takes.") from None


def add_flags(p: argparse.ArgumentParser, group: str) -> None:
    """Every declared limit of `group` as a flag: default from its environment variable, else the declaration."""
    for f, flag in declared():
        if flag.group != group:
            continue
        help_text = f"{flag.help} (default {_default_text(f, flag)}; also {flag.env})"
        if flag.switch:
            p.add_argument(f"--{flag.name}", action="store_true", default=_flag_default(f, flag), help=help_text)
            continue
        kind = type_of(f)
        p.add_argument(
            f"--{flag.name}",
            type=float if kind is int and flag.scale != 1 else kind,
            default=_flag_default(f, flag),
            help=help_text,
        )


def check_args(args: argparse.Namespace) -> list[str]:
    """Each flag out of its declared bounds, with what to use (empty when all are in bounds)."""
    wrong = []
    for f, flag in declared():
        value = getattr(args, flag.dest, None)
        if value is None or flag.switch or isinstance(value, str):
            continue
        whole = type_of(f) is int and flag.scale == 1
        if whole and value != int(value):
            wrong.append(f"--{flag.name}={value}: use a whole number.")
        elif not math.isfinite(value) or _out_of_bounds(value, flag):
            wrong.append(f"--{flag.name}={value}: use {_bounds_text(flag, whole)}.")
    return wrong


def _out_of_bounds(value: float, flag: Flag) -> bool:
    return (
        (flag.low is not None and value < flag.low)
        or (flag.above is not None and value <= flag.above)
        or (flag.high is not None and value > flag.high)
    )


def _bounds_text(flag: Flag, whole: bool) -> str:
    kind = "a whole number" if whole else "a number"
    if flag.low is not None and flag.high is not None:
        return f"{kind} from {flag.low:g} to {flag.high:g}"
    if flag.above is not None and flag.high is not None:
        return f"{kind} > {flag.above:g} and <= {flag.high:g}"
    if flag.low is not None:
        return f"{kind} >= {flag.low:g}"
    if flag.above is not None:
        return f"{kind} > {flag.above:g}"
    return kind


def summary(limits: ServerLimits) -> str:
    """One log line of what a visitor is held to."""
    hops = limits.proxy_hops
    return (
        f"[poss] client addresses: {hops or 'no'} trusted proxy hop{'s' if hops != 1 else ''}; live runs: "
        f"{limits.slots} at once, at most {limits.max_new_tokens} new tokens each, up to {limits.queue_size} "
        f"waiting; class pool reset {'by key' if limits.class_reset_key else 'off (no key)'}"
    )
