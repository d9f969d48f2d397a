"""What `auto` keeps on disk (JSON beside the prepared models): forward-time curves per machine and model, and the
budget chosen per draft, each read back only while it still describes this hardware."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from ..decoding.config import DecodeConfig
from ..models.default_model import cache_root
from ..models.target import TargetModel
from . import timing
from .cost_model import BudgetChoice
from .timing import ForwardCurve, curve_key


def curve_cache_path() -> Path:
    return cache_root() / "forward_curves.json"


def choice_cache_path() -> Path:
    return cache_root() / "auto_budgets.json"


def read_store(path: Path) -> dict:
    """A JSON cache file as a dict (empty when missing or unreadable: a cache is never worth an error)."""
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def write_store(path: Path, key: str, value) -> None:
    """Set one entry of a JSON cache file (re-read first, so other entries written meanwhile are kept)."""
    store = read_store(path)
    store[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(store, indent=1))
    tmp.replace(path)


def load_or_measure_curve(
    target: TargetModel, path: Path | None = None, remeasure: bool = False, log=None, **measure_kwargs
) -> ForwardCurve:
    """The cached curve for this device and model, or a fresh measurement (saved for next time)."""
    path = Path(path) if path is not None else curve_cache_path()
    key = curve_key(target)
    store = read_store(path)
    tell = log or say
    if not remeasure and key in store:
        cached = ForwardCurve.from_json(store[key])
        if not cached.due_again(target.device):
            return cached
        tell(
            f"the cached forward-time curve was measured while the machine was busy (load {cached.busy_load:.1f}); "
            f"measuring it again now that it is quiet"
        )
    tell(f"measuring the target's forward time vs verified tokens once for this device ({key}) ...")
    curve = timing.measure_forward_curve(target, **measure_kwargs)
    if curve.busy_load:
        tell(
            f"the machine is busy (load {curve.busy_load:.1f} on {os.cpu_count()} cores): these timings are too slow, "
            f"and they are measured again the first time it is quiet"
        )
    write_store(path, key, curve.to_json())
    tell(f"forward-time curve saved to {path}")
    return curve


def say(msg: str) -> None:
    """The default log line of long cache work."""
    print(f"[poss] {msg}", file=sys.stderr, flush=True)


def draft_fingerprint(draft) -> str:
    """Identifies a draft's trained weights cheaply: its kind and a hash of its fc layer."""
    digest = hashlib.sha1(draft.fc.weight.detach().float().cpu().numpy().tobytes()).hexdigest()[:12]
    return f"{draft.spec.label} fc:{digest}"


def cached_choice_key(target: TargetModel, draft, config: DecodeConfig) -> str:
    # "stops", "rows": choices cached before the depth stop and the LM-head reading were chosen are fitted again.
    return (
        f"{curve_key(target)} | {draft_fingerprint(draft)} | depth {config.depth} top_k {config.top_k} | stops | rows"
    )


def known_budget_choice(
    target: TargetModel, draft, config: DecodeConfig, path: Path | None = None, curve: ForwardCurve | None = None
) -> BudgetChoice | None:
    """The cached choice for this hardware, target, draft, depth and top_k, if one was calibrated before on the
    forward-time curve in use (`curve`, else the cached one; none if that is missing or due to be measured again)."""
    path = Path(path) if path is not None else choice_cache_path()
    known = read_store(path).get(cached_choice_key(target, draft, config))
    if known is None:
        return None
    if curve is None:
        stored = read_store(curve_cache_path()).get(curve_key(target))
        if stored is None:
            return None
        curve = ForwardCurve.from_json(stored)
        if curve.due_again(target.device):
            return None
    choice = BudgetChoice(**known)
    return choice if choice.curve_measured == curve.measured else None
