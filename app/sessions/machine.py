"""Which machine a speed figure comes from: this machine's CPU in a few words, a run's machine and tree as a lane's
header names them, and the speeds this machine's live runs measured, by the settings that move a speed (preset,
method, precision, tree), so that a recording made elsewhere shows this machine's figures beside its own."""

from __future__ import annotations

import functools
import platform
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from poss_core.rounds import metrics
from poss_core.runtime.compare import Comparison, Lane


@functools.cache
def cpu_name() -> str:
    """This CPU's model name ("AMD EPYC", "Intel(R) Xeon(R) Platinum 8480+"), read once from /proc/cpuinfo on Linux,
    else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def threads_of(hardware: dict[str, str]) -> int | None:
    """The torch threads a run's saved device line names ("cpu (x86_64, 2 threads)"), if any."""
    m = re.search(r"(\d+) threads?\)", hardware.get("device", ""))
    return int(m.group(1)) if m else None


def live_cpu(hardware: dict[str, str]) -> str:
    """The `cpu` entry a live run on this machine's CPU records (what record_examples.py writes too): the CPU's model
    name and the torch threads it ran on."""
    n = threads_of(hardware)
    return cpu_name() + (f", {n} thread{'s' if n != 1 else ''}" if n else "")


def mark_live(comp: Comparison) -> Comparison:
    """A live run on this machine's CPU records the CPU's name (`cpu`), as a recording does, so its header and a
    saved copy name the machine."""
    hw = comp.hardware if comp.hardware is not None else {}
    if not comp.replay and hw.get("device", "").startswith("cpu") and not hw.get("cpu"):
        hw["cpu"] = live_cpu(hw)
        comp.hardware = hw
    return comp


def machine_of(comp: Comparison) -> str:
    """The machine a run was decoded on, in a few words: the CPU a run saved (a recording's, or a live run's on this
    machine), else its device (a GPU names itself)."""
    hw = comp.hardware or {}
    device = hw.get("device", "")
    if hw.get("cpu") and not device.startswith("cuda"):
        cpu = hw["cpu"].replace("(R)", "").replace("(TM)", "")
        return re.sub(
            r"\b(\d+) thread\(s\)", lambda m: m.group(1) + (" thread" if m.group(1) == "1" else " threads"), cpu
        )
    return device or "unknown hardware"


def tree_of(comp: Comparison, lane: Lane) -> str:
    """A draft lane's tree as its header names it ("32-node tree, depth 6"); empty for a lane that drafts none."""
    if lane.plain or lane.tree_budget is None:
        return ""
    return f"{lane.tree_budget}-node tree, depth {int(comp.spec.depth)}"


def precision_of(comp: Comparison) -> str:
    return (comp.hardware or {}).get("dtype") or str(comp.spec.precision)


# ---------------------------------------------------------------- this machine's measured speeds


@dataclass(frozen=True)
class Speed:
    """Tokens and the lanes' own compute seconds, summed over this machine's live runs with one key."""

    tokens: int = 0
    seconds: float = 0.0
    runs: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


Key = tuple[str, str, str, str]  # preset, method, precision, tree ("" for plain decoding)
MAX_KEYS = 256  # distinct keys kept: presets x methods x precisions x trees a server's visitors try


class MachineSpeeds:
    """Every live run's lane speeds on this machine, summed per key, behind one lock (numbers only, bounded)."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self._lock = threading.Lock()
        self._speeds: dict[Key, Speed] = {}
        self.max_keys = max_keys

    @staticmethod
    def key(comp: Comparison, lane: Lane) -> Key:
        return comp.spec.preset, lane.method, precision_of(comp), tree_of(comp, lane)

    def add_run(self, comp: Comparison | None) -> int:
        """Add each lane of a live run that decoded tokens (a replay adds nothing: it was not decoded here, or was
        added when it was); returns how many lanes went in."""
        if comp is None or comp.replay:
            return 0
        added = 0
        with self._lock:
            for lane in comp.lanes:
                tokens, seconds = metrics.total_new_tokens(lane.events), metrics.wall_seconds(lane.events)
                if tokens <= 0 or seconds <= 0 or lane.error:
                    continue
                key = self.key(comp, lane)
                if key not in self._speeds and len(self._speeds) >= self.max_keys:
                    continue
                old = self._speeds.get(key, Speed())
                self._speeds[key] = Speed(old.tokens + tokens, old.seconds + seconds, old.runs + 1)
                added += 1
        return added

    def here(self, comp: Comparison, lane: Lane, plain_method: str) -> tuple[Speed, float | None] | None:
        """This machine's live speed for a lane of `comp` (same preset, method, precision and tree), and its speed-up
        over plain decoding here at the same precision (None without a plain run); None if no live run matches."""
        with self._lock:
            mine = self._speeds.get(self.key(comp, lane))
            plain = self._speeds.get((comp.spec.preset, plain_method, precision_of(comp), ""))
        if mine is None:
            return None
        up = mine.tokens_per_s / plain.tokens_per_s if plain is not None and not lane.plain else None
        return mine, up

    def clear(self) -> None:
        with self._lock:
            self._speeds.clear()


SPEEDS = MachineSpeeds()  # this server's: every tab's live runs add to it
