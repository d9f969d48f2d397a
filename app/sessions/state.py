"""What the app remembers: each browser tab's session (its comparison, conversation, pinned rounds, status, and its
"All my runs" pools, `tab_pools.py`), and the store that keeps them under a memory total and reaps idle ones."""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from app.server.class_pool import CLASS
from app.server.client_share import request_client
from app.server.limits import DEFAULTS
from app.sessions import machine, recordings
from app.sessions.tab_pools import POOLED_ROUND_BYTES, MethodPool, Pools, pooled_runs
from poss_core.models.resident import release_memory
from poss_core.runtime import methods
from poss_core.runtime.call_cap import CallCap
from poss_core.runtime.compare import ROUND_BYTES, Comparison

DEFAULT_METHODS = [methods.PLAIN, "eagle", "poss2"]


def default_lanes(preset) -> list[str]:
    """The lanes a tab starts with on `preset`: the default methods it offers."""
    return [m for m in DEFAULT_METHODS if m in methods.preset_methods(preset)]


# What every tab together may hold (paused Steps with their caches, finished and loaded runs, pooled rounds): past it
# the least recently used tab's holdings are freed and the tab is told why (`python app.py --session-memory-mb`).
# Sized for a 16 GB Space: the models, the live run's caches and the web server keep well within the rest.
APP_PRESET = ""  # the preset the app serves first: the class charts' preset while a tab shows no lanes


# The store's memory accounting (`SessionStore._held`) holds a tab's lock for a moment; a handler waits this long for
# it before calling the tab busy, so a Stop or Step never meets that moment as "busy" (a running handler holds the
# lock for its whole call).
HOLD_WAIT_S = 0.25


def hold(session: "Session", wait_s: float | None = None) -> bool:
    """Take the tab's lock for a handler, waiting up to `wait_s` (HOLD_WAIT_S): True when taken, False when another
    handler has it."""
    return session.lock.acquire(timeout=HOLD_WAIT_S if wait_s is None else wait_s)


@dataclass
class Session:
    """One browser tab's lanes. Two tabs never share one: the store keys sessions by Gradio's session hash."""

    lock: threading.Lock = field(default_factory=threading.Lock)  # one run, step or replay at a time
    comparison: Comparison | None = None  # what the lanes show
    stepping: bool = False  # `comparison` waits for the next Step
    loaded: Comparison | None = None  # a loaded run, not yet replayed or stepped through
    history: list[dict] = field(default_factory=list)  # the conversation so far (multi-turn)
    pins: dict[int, int] = field(default_factory=dict)  # lane -> round the user scrubbed the tree to
    call: CallCap | None = None  # the cap of the call this tab runs (Stop sets it, also before its lanes exist)
    status: tuple[str, str] = ("Type a prompt (or pick an example) and press Run.", "info")
    last_seen: float = field(default_factory=time.monotonic)  # the tab's last request
    released: str | None = None  # why the store ended this tab's paused work (said on the next Step)
    freed: str | None = None  # why the store let go of the runs this tab showed (said when it asks for them again)
    pools: dict[str, Pools] = field(default_factory=dict)  # preset -> method -> the rounds of every run decoded here
    # The comparisons `pools` took, held weakly (a pooled run's lanes are freed with it): each run goes in once.
    pooled: list[weakref.ref] = field(default_factory=list)
    class_seen: tuple[int, bool] | None = None  # (class pool version, conditional) the class charts last drew
    # (preset, methods) ticked in Settings before any run: the lanes' headers name them before the first Run
    idle_methods: tuple[str, list[str]] | None = None
    address: str | None = None  # the client address of the tab's last request (the class pool's share)

    def was_pooled(self, comp: Comparison) -> bool:
        return any(ref() is comp for ref in self.pooled)

    def pool_run(self, comp: Comparison | None) -> None:
        """Put a live run's rounds into the pools once it has ended (finished, stopped, or replaced while paused).
        A replay or a loaded saved run never goes in: a replay repeats a run that is in already, and a loaded file
        is not a run of this tab. The pools are replaced, never changed in place (a repaint may be reading them)."""
        if comp is None or comp.replay or self.was_pooled(comp):
            return
        self.pooled = [ref for ref in self.pooled if ref() is not None] + [weakref.ref(comp)]
        CLASS.add_run(comp, self.address)  # "everyone on this server": its numbers, once, with this tab's pools
        machine.SPEEDS.add_run(comp)  # this machine's speeds, which a recording's lanes show beside their own
        pools = dict(self.pools.get(comp.spec.preset, {}))
        for lane, run in pooled_runs(comp, light=True):
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
        for lane, run in pooled_runs(comp, light=False):
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

    def __init__(
        self, capacity: int = 256, idle_s: float = 600.0, memory_mb: float | None = DEFAULTS.memory_mb
    ) -> None:
        self.capacity = capacity
        self.idle_s = idle_s
        self.memory_mb = memory_mb  # what every tab together may hold (None: no total)
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
                session.address = request_client(request)[1] or session.address
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
            # A tab streaming a Run holds its lock and is bounded by the per-call cap: it is not reaped here.
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

    def enforce_total(self, keep: Session | None = None) -> int:
        """Keep what every tab holds (`Session.held_bytes`) within `memory_mb`: past it, free the holdings of the
        least recently used tabs first (their runs and paused Steps, then, if still past it, their pooled rounds),
        each told why, until the total fits. A tab a handler is serving (its lock held) and `keep` (the tab that
        just acted) are counted but not freed. Returns how many tabs were freed."""
        if not self.memory_mb:
            return 0
        most = self.memory_mb * 2**20
        holdings = self.holdings()
        sessions = [s for s, _ in holdings]
        held = {id(s): b for s, b in holdings}
        total = sum(held.values())
        if total <= most:
            return 0
        why = (
            f"the memory this server gives every tab together ({self.memory_mb:g} MB) was full and this tab had "
            f"been idle longest"
        )
        freed: set[int] = set()
        for pools_too in (False, True):
            for s in sorted(sessions, key=lambda s: s.last_seen):
                if total <= most:
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

    def last_seen(self, key: str) -> float | None:
        """When the tab `key` last acted (time.monotonic()), None for a tab the store no longer serves."""
        with self._lock:
            session = self._sessions.get(key)
        return None if session is None else session.last_seen

    def holdings(self) -> list[tuple[Session, int]]:
        """(tab, bytes it holds: `_held`) for every tab, the least recently active first."""
        with self._lock:
            sessions = list(self._sessions.values())
        return [(s, self._held(s)) for s in sessions]

    def start_reaper(self) -> None:
        """A daemon thread that reaps idle tabs even when no request comes in (started once)."""
        with self._lock:
            if self._reaper is not None:
                return

            def loop() -> None:
                while True:
                    # Often enough that a tab's holdings go soon after --idle-minutes, and the total soon after a
                    # tab grew past the memory total.
                    time.sleep(max(1.0, min(15.0, self.idle_s / 4)))
                    try:
                        self.reap()
                        self.enforce_total()
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

    def forget(self, key: str) -> None:
        """Let go of a tab the server dropped for never reading its replies (what its page load made), unless it
        holds something or a handler is serving it."""
        with self._lock:
            session = self._sessions.get(key)
            if session is None or session.lock.locked() or session.comparison or session.loaded or session.pools:
                return
            del self._sessions[key]

    def __len__(self) -> int:
        return len(self._sessions)


SESSIONS = SessionStore()
