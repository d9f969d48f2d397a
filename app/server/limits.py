"""Every limit the server holds a call, a tab or a client to, in one frozen value built from `python app.py`'s flags
(`ServerLimits.from_args`) and handed to what holds it (`server_state.install`): the handlers read `LIMITS`; the line
of live runs, the shares, the sessions, the disk, the saved runs' owners, the class pool and the model cache get their
values from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.server import body_cap, client_share, disk_budget, file_owners, live_queue

MB = 2**20
SESSION_MEMORY_MB = 4096.0  # what every tab together and the models kept loaded may hold, sized for a 16 GB Space


@dataclass(frozen=True)
class ServerLimits:
    call_s: float = 300.0  # --max-call-seconds: the most one Run, Step, Replay or /compare call decodes
    call_fits: bool = True  # not --no-call-fits: a call may start a tree-budget fit (within call_s)
    max_new_tokens: int | None = None  # --max-new-tokens: a live run's most new tokens (None: the settings' bound)
    slots: int = 2  # --concurrency: live runs decoding at once
    queue_size: int = live_queue.MAX_WAITING  # --queue-size: Gradio's queue, and live runs waiting for a slot
    per_client: int = client_share.PER_CLIENT  # --max-calls-per-client: calls one tab may have waiting or running
    per_address: int = client_share.PER_ADDRESS  # --max-calls-per-address (0: no limit)
    light_per_client: int = client_share.LIGHT_PER_CLIENT  # light events (page loads, views) one tab may hold
    light_per_address: int = client_share.LIGHT_PER_ADDRESS  # the same per address
    body_bytes: int = body_cap.BODY_CAP_BYTES  # the largest request body but an upload's
    proxy_hops: int = 0  # --proxy-hops: trusted proxies that append the client's address to X-Forwarded-For
    cache_age_s: float = 600.0  # --cache-minutes: files in Gradio's cache are deleted once this old
    disk_cap_bytes: int = disk_budget.DISK_CAP_BYTES  # --disk-cap-mb
    upload_bytes_per_s: float = disk_budget.UPLOAD_BYTES_PER_S  # --upload-mb-per-second, per client address
    saved_run_s: float = file_owners.SAVED_RUN_KEEP_S  # --saved-run-minutes: how long a saved run outlives its tab
    idle_s: float = 600.0  # --idle-minutes: a tab idle this long lets go of what it holds
    memory_mb: float = SESSION_MEMORY_MB  # --session-memory-mb: tabs' holdings and models but the one in use
    class_reset_key: str | None = None  # --class-reset-key
    results_dir: str | None = None  # --results-dir: a folder the Evidence tab may read besides results/

    @classmethod
    def from_args(cls, args: Any, slots: int, max_new_tokens: int, proxy_hops: int) -> ServerLimits:
        """The limits `python app.py`'s parsed flags ask for (checked by launch.check_flags first)."""
        return cls(
            call_s=args.max_call_seconds,
            call_fits=not args.no_call_fits,
            max_new_tokens=max_new_tokens,
            slots=slots,
            queue_size=args.queue_size,
            per_client=args.max_calls_per_client,
            per_address=args.max_calls_per_address,
            proxy_hops=proxy_hops,
            cache_age_s=args.cache_minutes * 60.0,
            disk_cap_bytes=int(args.disk_cap_mb * MB),
            upload_bytes_per_s=args.upload_mb_per_second * MB,
            saved_run_s=args.saved_run_minutes * 60.0,
            idle_s=args.idle_minutes * 60.0,
            memory_mb=args.session_memory_mb,
            class_reset_key=args.class_reset_key,
            results_dir=args.results_dir,
        )


LIMITS = ServerLimits()


def summary(limits: ServerLimits) -> str:
    """One log line of what a visitor is held to."""
    hops = limits.proxy_hops
    return (
        f"[poss] client addresses: {hops or 'no'} trusted proxy hop{'s' if hops != 1 else ''}; live runs: "
        f"{limits.slots} at once, at most {limits.max_new_tokens} new tokens each, up to {limits.queue_size} "
        f"waiting; class pool reset {'by key' if limits.class_reset_key else 'off (no key)'}"
    )
