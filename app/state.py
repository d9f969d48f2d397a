"""What the app remembers: each browser tab's session (its comparison, conversation, pinned rounds, status, and the
rounds of every run it decoded, pooled per preset and method for "All my runs"), how the lanes are drawn (the view
toggles), the Run settings as one value, and the settings the UI starts with."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from poss_core import methods, settings
from poss_core.call_budget import CallBudget
from poss_core.compare import ROUND_BYTES, Comparison, Lane, RunSpec
from poss_core.decoding.config import check_prompt_text
from poss_core.errors import ConfigError, PromptError
from poss_core.events import RoundEvent
from poss_core.models.hardware import cpu_bf16_units
from poss_core.models.presets import Preset
from poss_core.views.pooling import light_event, pool_events

from . import recordings
from .class_pool import CLASS

DEFAULT_METHODS = [methods.PLAIN, "eagle", "poss2"]
# The server-side cap on work per call: a Run, Replay or /compare call decodes for at most this many seconds, then
# its lanes are stopped and the status (or the API's answer) says so. `python app.py --max-call-seconds` sets it.
CALL_LIMIT_S = 300.0
# Whether a call may start a new tree-budget fit (within its CALL_LIMIT_S); False: only fits cached at start-up or on
# disk are used, and a lane that would need a new one starts on the default budget and says so
# (`python app.py --no-call-fits`, for a public server).
CALL_FITS = True
# "All my runs" keeps at most this many rounds per preset and method in a tab, the oldest dropped first. A pooled
# round is light (the accepted path and one node per other depth, no token ids): about 0.8 KB at depth 6, so a full
# method pool is about 2.5 MB (docs/architecture.md, "Limits a public app needs", says how this was measured).
POOL_ROUNDS = 3000
POOLED_ROUND_BYTES = 850  # a pooled round's memory, rounded up from the 816 bytes measured (see POOL_ROUNDS)
# What every tab together may hold (paused Steps with their caches, finished and loaded runs, pooled rounds): past it
# the least recently used tab's holdings are freed and the tab is told why (`python app.py --session-memory-mb`).
# Sized for a 16 GB Space: the models, the live run's caches and the web server keep well within the rest.
SESSION_MEMORY_MB = 4096.0
POOLED_VIEW = "all my runs"  # the charts' source control: "this run", this, or CLASS_VIEW
CLASS_VIEW = "everyone on this server"  # every finished live run on the server, pooled (app/class_pool.py)
# The most new tokens one live run may ask for (`python app.py --max-new-tokens`; the UI's slider stops there too).
# None: the settings' own bound (LIMITS) only.
MAX_NEW_TOKENS: int | None = None
APP_PRESET = ""  # the preset the app serves first: the class charts' preset while a tab shows no lanes


@dataclass
class View:
    """How the lanes are drawn (the toggles); nothing here changes what runs."""

    color_by: str = "position"  # or "specialist"
    show_rejected: bool = False
    conditional: bool = True
    pooled: bool = False  # the charts pool every run this tab decoded on the preset ("All my runs")
    everyone: bool = False  # the charts pool every finished live run on this server ("everyone on this server")

    @classmethod
    def from_controls(
        cls, color_by: str, show_rejected: bool, pos_acc_mode: str, charts_from: str | bool = "this run"
    ) -> "View":
        """From the view controls' values (radio labels and a checkbox)."""
        return cls(
            color_by="specialist" if str(color_by).startswith("spec") else "position",
            show_rejected=bool(show_rejected),
            conditional=not str(pos_acc_mode).startswith("uncond"),
            pooled=charts_from is True or str(charts_from) == POOLED_VIEW,
            everyone=str(charts_from) == CLASS_VIEW,
        )


APP_SETTINGS = settings.offered_on(settings.APP)  # the Run controls after the prompt, preset and methods


class RunSettings(settings.ByName):
    """The Run settings as the UI holds them: the prompt, Multi-turn, the preset, the methods, and the value of every
    setting the app offers (`APP_SETTINGS`, by name, as the controls send them: a slider's 4.0 for an integer)."""

    def __init__(self, prompt: str, multi_turn: bool, preset: str, methods: list[str], **values: Any) -> None:
        self.prompt, self.multi_turn, self.preset, self.methods = prompt, multi_turn, preset, methods
        self.values = values

    @classmethod
    def from_controls(
        cls, prompt: str, multi_turn: bool, preset: str, methods: list[str], *values: Any
    ) -> "RunSettings":
        """From the controls' values in the order ui.py lists them (one per APP_SETTINGS name)."""
        return cls(prompt, multi_turn, preset, methods, **dict(zip(APP_SETTINGS, values)))

    def spec(self, history: list[dict]) -> RunSpec:
        """What a comparison runs, checked by `RunSpec.resolve` (raises PossError with a readable message): the
        prompt, after `history` when Multi-turn is ticked, the chosen methods once each in the preset's order, every
        setting typed and in bounds, and no more new tokens than this server gives a run."""
        if self.prompt is None or (isinstance(self.prompt, str) and not self.prompt.strip()):
            raise PromptError("the prompt is empty: type a question or instruction (or pick an example).")
        check_prompt_text(self.prompt)  # named "prompt", also when it follows a conversation
        if self.multi_turn and history:
            message: str | list[dict] = list(history) + [{"role": "user", "content": self.prompt}]
        else:
            message = self.prompt
        chosen = self.methods or []
        if isinstance(chosen, (list, tuple)):
            chosen = list(dict.fromkeys(chosen))  # a checkbox group's values, once each
        # An unset choice (a radio Gradio sends as None) reads its default; anything else is checked as sent.
        values = {k: v for k, v in self.values.items() if not (v in (None, "") and settings.SETTINGS[k].choices)}
        spec = RunSpec(message, chosen, self.preset, **values)
        order = list(spec.resolve().offered)
        spec.methods.sort(key=order.index)
        if MAX_NEW_TOKENS is not None and spec.max_new_tokens > MAX_NEW_TOKENS:
            raise ConfigError(
                f"max_new_tokens={spec.max_new_tokens} is more than this server gives one run "
                f"({MAX_NEW_TOKENS}, so that every visitor gets a turn): ask for {MAX_NEW_TOKENS} or fewer."
            )
        return spec


@dataclass
class PooledRun:
    """One run's rounds of one method as "All my runs" keeps them, and the settings that shaped them."""

    events: list[RoundEvent]
    settings: dict[str, Any]


def pooled_event(e: RoundEvent) -> RoundEvent:
    """A round as the pool keeps it: the benchmark's light event (the accepted path and one node per other depth),
    without token ids or per-depth marks, which no chart reads."""
    return replace(light_event(e), tokens=[], draft_ms_by_depth=[])


def lane_settings(comp: Comparison, lane: Lane) -> dict[str, Any]:
    """The settings that move a lane's acceptance and speed (the prompt and seed are meant to vary)."""
    s = comp.spec
    out: dict[str, Any] = {
        "precision": comp.hardware.get("dtype") or s.precision,
        "quantization": s.quantization,
        "temperature": s.temperature,
        "top-p": s.top_p,
    }
    if not lane.plain:
        out.update(
            {
                "depth": s.depth,
                "top-k": s.top_k,
                "depth stop": lane.depth_stop,
                "tree budget": lane.budget if lane.budget is not None else s.tree_budget,
            }
        )
    return out


@dataclass
class MethodPool:
    """One method's rounds over the runs a tab decoded on one preset, the oldest first, at most `POOL_ROUNDS` of
    them. A pool is never changed once built (`added` returns a new one), so a repaint can read it while a handler
    adds a run."""

    label: str  # the method's short name (chart legends)
    runs: tuple[PooledRun, ...] = ()
    dropped: int = 0  # rounds dropped past the cap, oldest first

    @property
    def rounds(self) -> int:
        return sum(len(r.events) for r in self.runs)

    def added(self, run: PooledRun, cap: int | None = None) -> "MethodPool":
        """This pool with `run` last, its oldest rounds dropped past `cap` (POOL_ROUNDS by default). A run cut
        short keeps counting its new tokens from the first round it keeps."""
        runs, dropped = list(self.runs) + [run], self.dropped
        excess = sum(len(r.events) for r in runs) - (POOL_ROUNDS if cap is None else cap)
        while excess > 0:
            first = runs[0]
            if len(first.events) <= excess:
                runs.pop(0)
                cut = len(first.events)
            else:
                base = first.events[excess - 1].new_tokens
                runs[0] = PooledRun(
                    [replace(e, new_tokens=e.new_tokens - base) for e in first.events[excess:]], first.settings
                )
                cut = excess
            excess, dropped = excess - cut, dropped + cut
        return MethodPool(self.label, tuple(runs), dropped)

    def events(self) -> list[RoundEvent]:
        """Every kept round as one stream whose `new_tokens` counts on across runs: what the charts take (built on
        each call, not kept: a second copy of every round would double the pool's memory)."""
        return pool_events(r.events for r in self.runs)

    def varied(self) -> list[str]:
        """The settings that differ between the pooled runs (in the order `lane_settings` lists them)."""
        if not self.runs:
            return []
        keys = list(self.runs[0].settings)
        return [k for k in keys if len({repr(r.settings.get(k)) for r in self.runs}) > 1]


Pools = dict[str, MethodPool]  # method name -> its pool


def _pooled_runs(comp: Comparison, light: bool) -> list[tuple[Lane, PooledRun]]:
    """Each lane with rounds, and its rounds as a pooled run (`light`: as the pool keeps them)."""
    return [
        (
            lane,
            PooledRun(
                [pooled_event(e) for e in lane.events] if light else list(lane.events), lane_settings(comp, lane)
            ),
        )
        for lane in comp.lanes
        if lane.events
    ]


@dataclass
class Session:
    """One browser tab's lanes. Two tabs never share one: the store keys sessions by Gradio's session hash."""

    lock: threading.Lock = field(default_factory=threading.Lock)  # one run, step or replay at a time
    comparison: Comparison | None = None  # what the lanes show
    stepping: bool = False  # `comparison` waits for the next Step
    loaded: Comparison | None = None  # a loaded run, not yet replayed or stepped through
    history: list[dict] = field(default_factory=list)  # the conversation so far (multi-turn)
    pins: dict[int, int] = field(default_factory=dict)  # lane -> round the user scrubbed the tree to
    call: CallBudget | None = None  # the budget of the call this tab runs (Stop sets it, also before its lanes exist)
    status: tuple[str, str] = ("Type a prompt (or pick an example) and press Run.", "info")
    last_seen: float = field(default_factory=time.monotonic)  # the tab's last request
    released: str | None = None  # why the store ended this tab's paused work (said on the next Step)
    freed: str | None = None  # why the store let go of the runs this tab showed (said when it asks for them again)
    pools: dict[str, Pools] = field(default_factory=dict)  # preset -> method -> the rounds of every run decoded here
    # The comparisons `pools` took, held weakly (a pooled run's lanes are freed with it): each run goes in once.
    pooled: list[weakref.ref] = field(default_factory=list)
    class_seen: tuple[int, bool] | None = None  # (class pool version, conditional) the class charts last drew

    def was_pooled(self, comp: Comparison) -> bool:
        return any(ref() is comp for ref in self.pooled)

    def pool_run(self, comp: Comparison | None) -> None:
        """Put a live run's rounds into the pools once it has ended (finished, stopped, or replaced while paused).
        A replay or a loaded saved run never goes in: a replay repeats a run that is in already, and a loaded file
        is not a run of this tab. The pools are replaced, never changed in place (a repaint may be reading them)."""
        if comp is None or comp.replay or self.was_pooled(comp):
            return
        self.pooled = [ref for ref in self.pooled if ref() is not None] + [weakref.ref(comp)]
        CLASS.add_run(comp)  # "everyone on this server": its numbers, once, with this tab's pools
        pools = dict(self.pools.get(comp.spec.preset, {}))
        for lane, run in _pooled_runs(comp, light=True):
            pools[lane.method] = pools.get(lane.method, MethodPool(lane.short)).added(run)
        self.pools = {**self.pools, comp.spec.preset: pools}

    def pool_view(self, comp: Comparison | None) -> Pools:
        """What "All my runs" draws next to `comp`: the pools of its preset, plus its own rounds so far while it is
        a live run not pooled yet (so the pooled charts move as it runs); for a replay, the pools alone."""
        if comp is None:
            return {}
        pools = dict(self.pools.get(comp.spec.preset, {}))
        if comp.replay or self.was_pooled(comp):
            return pools
        for lane, run in _pooled_runs(comp, light=False):
            pools[lane.method] = pools.get(lane.method, MethodPool(lane.short)).added(run)
        return pools

    def forget_runs(self) -> int:
        """Empty every preset's pools ("Forget my runs"); returns how many rounds were forgotten. A finished run on
        show stays out (it went in already); a run still going goes in when it ends."""
        rounds = sum(p.rounds for pools in self.pools.values() for p in pools.values())
        self.pools = {}
        return rounds

    def end_work(self, why: str) -> None:
        """Stop this tab's comparison and free its decoders (their KV caches): a running one stops before its next
        round (the handler streaming it closes it), a paused Step session is closed here; a call still loading or
        fitting stops within one round of that."""
        if self.call is not None:
            self.call.set()
        comp = self.comparison
        if comp is None or comp.finished:
            return
        comp.stop()
        if self.lock.acquire(blocking=False):  # nothing is turning the lanes: close them now
            try:
                comp.drain()
                if self.stepping:
                    self.released = why
                    self.status = (
                        f"Step mode ended and its memory was freed because {why}. Step starts over, "
                        f"Run starts a new comparison.",
                        "info",
                    )
                self.stepping = False
            finally:
                self.lock.release()

    def held_bytes(self) -> int:
        """An estimate of the memory this tab holds: its comparison and loaded run (their rounds and, while a Step is
        paused, its decoders' caches: `Comparison.held_bytes`) and its pooled rounds. The bundled examples'
        recordings are shared by every tab and count for none."""
        shared = recordings.loaded_runs()
        comps = {id(c): c for c in (self.comparison, self.loaded) if c is not None and id(c) not in shared}
        rounds = sum(p.rounds for pools in self.pools.values() for p in pools.values())
        return sum(c.held_bytes() for c in comps.values()) + POOLED_ROUND_BYTES * rounds

    def free_runs(self, why: str) -> None:
        """Let go of the finished (or stopped) run on show and a loaded saved run, with what they hold; "All my runs"
        keeps its pooled rounds. Nothing happens while a handler holds the tab."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            if self.comparison is not None and not self.comparison.finished:
                return
            if self.comparison is None and self.loaded is None:
                return
            self.pool_run(self.comparison)  # pooled once, whatever ended it
            self.comparison, self.loaded, self.stepping = None, None, False
            self.pins.clear()
            self.status = (
                f"The run on show was cleared to free memory because {why}; your pooled runs are kept. "
                f"Run, or load a saved run, to see lanes again.",
                "info",
            )
            self.freed = self.status[0]
        finally:
            self.lock.release()

    def release(self, why: str, pools: bool = False) -> None:
        """Free what this tab holds, saying why: a paused Step's decoders (their caches), then the run on show and a
        loaded run (`end_work`, `free_runs`); with `pools`, its pooled rounds too. Nothing is freed while a handler
        holds the tab."""
        if self.comparison is not None and not self.comparison.finished:
            self.end_work(why)
        self.free_runs(why)
        if pools and self.pools and self.lock.acquire(blocking=False):
            try:
                self.forget_runs()
                self.status = (
                    f'This tab\'s pooled runs ("All my runs") and the run on show were cleared to free memory '
                    f"because {why}. Run, or load a saved run, to see lanes again.",
                    "info",
                )
            finally:
                self.lock.release()


class SessionStore:
    """Sessions by session hash. Past `capacity` the least recently used is evicted; a tab idle for `idle_s` seconds
    has its paused or running work stopped and its decoders freed (the lanes it shows stay). Either way the work ends:
    nothing keeps decoding, or holding caches, for a tab the store no longer serves. An evicted tab that comes back
    gets a fresh session with the same lock while its old work is still ending, so two runs of one tab never overlap."""

    def __init__(self, capacity: int = 256, idle_s: float = 600.0, budget_mb: float | None = SESSION_MEMORY_MB) -> None:
        self.capacity = capacity
        self.idle_s = idle_s
        self.budget_mb = budget_mb  # what every tab together may hold (None: no total)
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._ending: dict[str, Session] = {}  # evicted sessions whose work may still be running, by key
        self._last_reap = 0.0
        self._reaper: threading.Thread | None = None

    @staticmethod
    def key(request: Any) -> str:
        return str(getattr(request, "session_hash", None) or "local")

    def get(self, request: Any, touch: bool = True) -> Session:
        """The tab's session (a new one for a tab not seen yet). `touch=False` for a call that only reads (a view
        toggle, a tree slider, the class charts' timer, Save): it does not count as the tab being active, so it
        never postpones the idle reaping of what the tab holds."""
        key = self.key(request)
        evicted = []
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                ending = self._ending.pop(key, None)
                lock = ending.lock if ending is not None and ending.lock.locked() else threading.Lock()
                session = self._sessions[key] = Session(lock=lock)
                while len(self._sessions) > self.capacity:
                    old_key, old = self._sessions.popitem(last=False)
                    evicted.append(old)
                    self._ending[old_key] = old
                for k in [k for k, s in self._ending.items() if not s.lock.locked()]:
                    del self._ending[k]
            if touch:
                self._sessions.move_to_end(key)
                session.last_seen = time.monotonic()
        for old in evicted:
            old.end_work(f"this tab was evicted (the server serves at most {self.capacity} tabs at once)")
        if time.monotonic() - self._last_reap > min(10.0, self.idle_s):
            self.reap()
        return session

    def reap(self, now: float | None = None) -> int:
        """End the work of every tab idle for more than `idle_s` and free the runs it holds (returns how many tabs);
        the store calls it on requests and, once `start_reaper` ran, every `idle_s / 4` seconds. A paused Step
        session is ended first (its decoders freed, its lanes shown); a finished, stopped or loaded run an idle tab
        still holds is then let go, so memory no longer waits for eviction past `capacity` tabs."""
        now = time.monotonic() if now is None else now
        self._last_reap = now
        with self._lock:
            # A tab streaming a Run holds its lock and is bounded by CALL_LIMIT_S: it is not reaped here.
            idle = [
                s
                for s in self._sessions.values()
                if now - s.last_seen > self.idle_s
                and not s.lock.locked()
                and (s.comparison is not None or s.loaded is not None)
            ]
        minutes = self.idle_s / 60
        idle_for = f"{minutes:g} minute{'s' if minutes != 1 else ''}"
        for s in idle:
            if s.comparison is not None and not s.comparison.finished:
                s.end_work(f"it waited more than {idle_for} for the next Step")  # its lanes stay shown until later
            else:
                s.free_runs(f"this tab was idle for more than {idle_for}")
        if idle:
            release_memory()
        return len(idle)

    def enforce_budget(self, keep: Session | None = None) -> int:
        """Keep what every tab holds (`Session.held_bytes`) within `budget_mb`: past it, free the holdings of the
        least recently used tabs first (their runs and paused Steps, then, if still past it, their pooled rounds),
        each told why, until the total fits. A tab a handler is serving (its lock held) and `keep` (the tab that
        just acted) are counted but not freed. Returns how many tabs were freed."""
        if not self.budget_mb:
            return 0
        budget = self.budget_mb * 2**20
        with self._lock:
            sessions = list(self._sessions.values())
        held = {id(s): self._held(s) for s in sessions}
        total = sum(held.values())
        if total <= budget:
            return 0
        why = (
            f"the memory this server gives every tab together ({self.budget_mb:g} MB) was full and this tab had "
            f"been idle longest"
        )
        freed: set[int] = set()
        for pools_too in (False, True):
            for s in sorted(sessions, key=lambda s: s.last_seen):
                if total <= budget:
                    break
                if s is keep or not held[id(s)] or s.lock.locked():
                    continue
                s.release(why, pools=pools_too)
                now_held = self._held(s)
                total -= held[id(s)] - now_held
                held[id(s)] = now_held
                freed.add(id(s))
        if freed:
            release_memory()
        return len(freed)

    @staticmethod
    def _held(session: Session) -> int:
        """`session.held_bytes()` while no handler turns its lanes (a running tab's caches are bounded by the live
        slots and the per-call cap: counted as its rounds only)."""
        if not session.lock.acquire(blocking=False):
            comp = session.comparison
            return 0 if comp is None else ROUND_BYTES * sum(len(lane.events) for lane in comp.lanes)
        try:
            return session.held_bytes()
        finally:
            session.lock.release()

    def held_mb(self) -> float:
        """What every tab holds together, MB (for tests and the server checks)."""
        with self._lock:
            sessions = list(self._sessions.values())
        return sum(self._held(s) for s in sessions) / 2**20

    def start_reaper(self) -> None:
        """A daemon thread that reaps idle tabs even when no request comes in (started once)."""
        with self._lock:
            if self._reaper is not None:
                return

            def loop() -> None:
                while True:
                    # Often enough that a tab's holdings go soon after --idle-minutes, and the total soon after a
                    # tab grew past the budget.
                    time.sleep(max(1.0, min(15.0, self.idle_s / 4)))
                    try:
                        self.reap()
                        self.enforce_budget()
                    except Exception:  # noqa: BLE001 - the reaper must outlive a bad session
                        pass

            self._reaper = threading.Thread(target=loop, daemon=True, name="poss-session-reaper")
            self._reaper.start()

    def drop(self, request: Any) -> None:
        with self._lock:
            session = self._sessions.pop(self.key(request), None)
        if session is not None:
            session.end_work("the tab was closed")
            release_memory()

    def __len__(self) -> int:
        return len(self._sessions)


SESSIONS = SessionStore()


_MALLOC_TRIM: Any = None


def release_memory() -> bool:
    """Return freed memory to the system: collect Python's cycles, then ask glibc to give back the free pages it
    keeps (`malloc_trim(0)`; without it the process's RSS stays at its peak after tabs' caches are freed). False
    where the C library has no malloc_trim (musl, macOS): collecting is all then."""
    global _MALLOC_TRIM
    gc.collect()
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
            _MALLOC_TRIM.argtypes, _MALLOC_TRIM.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    return bool(_MALLOC_TRIM and _MALLOC_TRIM(0))


PRESET_SETTINGS = ("depth", "top_k", "tree_budget", "max_new_tokens")  # what ui_defaults sets per preset


def ui_defaults(preset: Preset) -> dict[str, Any]:
    """Tree settings for the UI: the paper's on a GPU; a smaller tree on a CPU, where verifying it costs more. Every
    draft lane drafts the same tree by default (no fitted budget, no depth stop), so the lanes compare like for like
    and every specialist drafts every round; "Fastest tree for this machine" (`auto_budget`) is a choice."""
    cpu = preset.device == "cpu"
    return {
        "depth": preset.depth,
        "top_k": min(preset.top_k, 8) if cpu else preset.top_k,
        "tree_budget": min(preset.tree_budget, 32) if cpu else preset.tree_budget,
        "max_new_tokens": 64 if cpu else 128,
        "auto_budget": False,
    }


def initial_precision(requested: str, gpu: bool, bf16_units: str | None) -> str:
    """The Precision setting `python app.py` starts with: what --dtype asks for, except that `auto` on a CPU with bf16
    units starts in bfloat16, where the draft lanes are measurably faster than plain decoding (fp32 on such a CPU
    showed no speed-up in the app: README, "What you see"); float32 stays one click away for exact identity."""
    if requested == "auto" and not gpu and bf16_units:
        return "bfloat16"
    return requested


def precision_note(gpu: bool) -> str:
    """The Precision setting's explanation, for this machine."""
    if gpu:
        return (
            "auto = bfloat16 on a GPU with bf16 units, float16 on an older one (a T4); float32 shows token-for-token "
            "identity with plain decoding"
        )
    units = cpu_bf16_units()
    speed = (
        f"this CPU has {units}, so bfloat16 is faster here"
        if units
        else "this CPU has no native bf16 units, so bfloat16 may be slower here"
    )
    return (
        f"auto = float32 on a CPU: every lane identical to plain decoding, token for token. bfloat16: {speed}; "
        f"a lane may then differ from plain at a rounding near-tie, and its badge says so"
    )


def quantization_note(gpu: bool) -> str:
    """The Quantization setting's explanation, for this machine: what it costs here, said plainly."""
    if gpu:
        return (
            "auto quantizes only when the target would not fit the GPU (8-bit, else 4-bit NF4); the drafts stay "
            "unquantized, and every lane is verified by the quantized target itself (identical to its plain "
            "decoding up to rounding near-ties, and int8's rounding noise in 8-bit)"
        )
    return (
        "auto = none on a CPU. 8-bit and 4-bit run the target through bitsandbytes, as a GPU short of memory "
        "would: on a CPU they save memory but are slower (plain decoding at 0.6-0.7x float32's tokens/s), the "
        "first run loads another copy of the target, and the drafts were trained on the full-precision target, "
        "so acceptance changes (measured τ: 8-bit lower, 4-bit higher). 4-bit lanes stay identical to plain "
        "decoding of the same quantized target; 8-bit ones can "
        "part from it where int8's rounding noise decides between two close tokens, and their badge says so"
    )


def method_choices(preset: Preset) -> list[tuple[str, str]]:
    """(label, value) pairs for the methods a preset offers, plain decoding first: each method's label, with
    "(untrained)" after a draft that is a random stand-in (nothing trained is bundled for it yet)."""
    return [
        (m.label if m.trained else f"{m.label} (untrained)", name) for name, m in methods.lane_methods(preset).items()
    ]
