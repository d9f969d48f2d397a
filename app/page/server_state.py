"""Hand the server's limits to what holds them: `limits.LIMITS` for the handlers, and each value to the line of live
runs, the shares, the sessions, the disk, the saved runs' owners, the class pool and the model cache."""

from __future__ import annotations

from app.server import body_cap, client_share, disk_cap, file_owners, live_queue
from app.server import limits as limits_module
from app.server.class_pool import CLASS
from app.server.limits import MB, ServerLimits
from app.sessions import state
from poss_core.runtime.model_cache import MODELS


def install(limits: ServerLimits) -> None:
    """Make `limits` the server's: `LIMITS` for the handlers, and each value to the object that holds it."""
    limits_module.LIMITS = limits
    live_queue.LIVE.slots, live_queue.LIVE.max_waiting = max(1, limits.slots), limits.queue_size
    live_queue.LIVE.cap_s = limits.call_s  # a run holds its slot for at most the per-call cap
    client_share.SHARE.per_client, client_share.SHARE.per_address = limits.per_client, limits.per_address
    client_share.SHARE.light_per_client = limits.light_per_client
    client_share.SHARE.light_per_address = limits.light_per_address
    body_cap.BODY_CAP_BYTES = limits.body_bytes
    client_share.PROXY_HOPS = limits.proxy_hops
    state.SESSIONS.idle_s, state.SESSIONS.memory_mb = limits.idle_s, limits.memory_mb
    MODELS.memory_bytes = int(limits.memory_mb * MB)
    disk_cap.DISK.cap_bytes, disk_cap.DISK.age_s = limits.disk_cap_bytes, limits.cache_age_s
    disk_cap.RATE.bytes_per_s = limits.upload_bytes_per_s
    file_owners.OWNERS.keep_s = limits.saved_run_s
    CLASS.reset_key, CLASS.per_address = limits.class_reset_key, limits.class_runs_per_address
