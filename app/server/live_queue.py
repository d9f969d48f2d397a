"""The line live runs (Run, Step, /compare) take turns in: `slots` of them decode at once, the rest wait in a line
where addresses take turns, then sessions within an address, and a waiting run's status shows its place in line and
an estimate of the wait (the expected seconds of the runs ahead, from how long the recent live runs held their slot
and the per-call cap). Replays and the class charts never enter it.

Why by hand and not a Gradio concurrency limit: Gradio's queue starts an event group's calls first come, first
served, and estimates a wait from the average call. A class behind one address, or one visitor with many tabs, then
holds every place ahead of everyone else; here a visitor from another address takes the next slot
(`python scripts/server_check.py fair`; figures in docs/results.md). Turns alone would let a stream of new addresses
push a waiting call back without end, so a call is passed by at most `LiveQueue.PASSED_MAX` calls that joined after
it (`python scripts/server_check.py addr`). The live events' Gradio group has no limit, so Gradio's queue only
hands calls to the handlers, which wait here
(`LiveQueue.wait`), showing their place."""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections import OrderedDict, deque

from app.server.limits import DEFAULTS
from app.server.server_text import REFUSED
from poss_core.base.errors import PossError


def auto_slots(cores: int | None, threads: int) -> int:
    """Live runs decoding at once by default: half the cores over each run's torch threads, at least one (a 2-vCPU
    Space: one run on one core, the other core left to the web server, the drawing and the replays)."""
    return max(1, (cores or os.cpu_count() or 2) // 2 // max(1, threads))


# A slot's hold per unit of work (lanes x new tokens asked for) before any live run has ended: a 64-token three-lane
# run of the default model on one thread of a 2-vCPU machine takes about 15 s, the first one after start-up longer.
TYPICAL_S_PER_UNIT = 0.1


class QueueFull(PossError):
    """The queue of live runs is full: the server says so instead of taking more than it can serve."""


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class LiveQueue:
    """Live runs in a fair line: `slots` decode at once, up to `max_waiting` wait. The next to start is the oldest
    call of the least recently served session of the least recently served address (an address or session not
    served yet comes first), so addresses take turns, then sessions within an address: one address's flood waits
    behind every other address's next call, and one tab's behind its neighbours'. A waiting call that calls joining
    after it have passed PASSED_MAX times goes next (the oldest first), so whatever the number of addresses, a call
    waits for at most the calls ahead of it when it joined plus PASSED_MAX. A ticket's place is 0 while it decodes
    and k for the k-th in that order.

    Each ticket carries its work (lanes times the new tokens it asked for). The wait is estimated by playing the line
    forward, each run holding its slot for its expected seconds: its work times the seconds per unit of work that
    the last few runs took (`typical_s_per_unit` before any run ended), never more than `cap_s` (a call is stopped
    at the per-call cap)."""

    def __init__(
        self,
        slots: int = 1,
        max_waiting: int = DEFAULTS.queue_size,
        typical_s_per_unit: float = TYPICAL_S_PER_UNIT,
        history: int = 8,
        cap_s: float | None = None,
    ) -> None:
        self.slots = slots
        self.max_waiting = max_waiting
        self.typical_s_per_unit = typical_s_per_unit
        self.cap_s = cap_s  # the per-call cap (`--max-call-seconds`): the longest a run holds its slot
        self._lock = threading.Condition()  # notified when a run leaves: the waiters check their turn
        self._ids = itertools.count(1)
        self._waiting: list[int] = []  # tickets in arrival order
        self._who: dict[int, tuple[str, str]] = {}  # ticket -> (address, session)
        self._running: dict[int, float] = {}  # ticket -> when it got its slot
        self._work: dict[int, float] = {}  # ticket -> lanes x new tokens asked for
        self._done: deque[tuple[float, float]] = deque(maxlen=history)  # (seconds held, work) of the last runs
        # When each address and session last got a slot; kept after their calls end, so leaving the line and
        # joining again does not jump it (pruned to the most recent SERVED_KEPT).
        self._served: OrderedDict[tuple[str, ...], float] = OrderedDict()
        self._ordered: list[int] | None = None  # the waiting tickets in starting order (None: to work out again)
        self._passed: dict[int, int] = {}  # waiting ticket -> calls that joined after it and started before it

    SERVED_KEPT = 4096
    # The most calls that joined later may start ahead of a waiting one; then it goes first (in arrival order). Turns
    # alone would let a stream of new addresses (a class arriving) push a returning visitor back without end.
    PASSED_MAX = 8

    def join(self, work: float = 1.0, session: str | None = None, address: str | None = None) -> int:
        """A ticket in the line for a run of `work` units from `session` at `address` (QueueFull past
        `max_waiting`)."""
        with self._lock:
            if len(self._waiting) >= self.max_waiting:
                REFUSED("the line of live runs is full", address)
                raise QueueFull(
                    f"{len(self._waiting)} live runs are already waiting, the most this server queues: "
                    f"try again in a few minutes (the examples replay at once meanwhile)."
                )
            ticket = next(self._ids)
            self._waiting.append(ticket)
            self._ordered = None
            self._who[ticket] = (address or "?", session or "?")
            self._work[ticket] = max(1.0, float(work))
            self._passed[ticket] = 0
            return ticket

    def _order(self) -> list[int]:
        """The waiting tickets in the order they will start (see the class), worked out again only after the line
        changed (every waiting call checks its turn whenever a run leaves, and redraws its place once a second)."""
        if self._ordered is None:
            self._ordered = self._play_order()
        return self._ordered

    def _play_order(self) -> list[int]:
        """The line played forward, each start making its address and session the most recently served and counting
        as passing every call that joined before it; a call passed PASSED_MAX times goes next."""
        served: dict[tuple[str, ...], tuple[int, float]] = {k: (0, t) for k, t in self._served.items()}
        passed = {t: self._passed.get(t, 0) for t in self._waiting}
        queues: dict[str, dict[str, deque[int]]] = {}
        for t in self._waiting:  # arrival order within each session
            address, session = self._who[t]
            queues.setdefault(address, {}).setdefault(session, deque()).append(t)

        def key(k: tuple[str, ...], first: int) -> tuple[int, float, int]:
            # Never served sorts first; ties go to the one whose oldest waiting call came first.
            return (*served.get(k, (0, float("-inf"))), first)

        order: list[int] = []
        for step in range(len(self._waiting)):
            aged = [t for t in passed if passed[t] >= self.PASSED_MAX]
            if aged:
                ticket = min(aged)
                address, session = self._who[ticket]
            else:
                address = min(queues, key=lambda a: key(("a", a), min(q[0] for q in queues[a].values())))
                sessions = queues[address]
                session = min(sessions, key=lambda s: key(("s", address, s), sessions[s][0]))
                ticket = sessions[session][0]
            queues[address][session].remove(ticket)
            order.append(ticket)
            del passed[ticket]
            for t in passed:
                passed[t] += t < ticket
            served[("a", address)] = served[("s", address, session)] = (1, float(step))  # after every real start
            if not queues[address][session]:
                del queues[address][session]
            if not queues[address]:
                del queues[address]
        return order

    def try_start(self, ticket: int) -> bool:
        """Take a slot if one is free and no one the line puts first is still waiting for it; True once running."""
        with self._lock:
            return self._start(ticket)

    def wait(self, ticket: int, timeout: float) -> bool:
        """Wait up to `timeout` seconds for this ticket's slot (`try_start` each time a run leaves the line): True
        once it runs, False when the time is up and it still waits (its caller redraws the status, or checks Stop)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._start(ticket):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def _start(self, ticket: int) -> bool:
        if ticket in self._running:
            return True
        free = self.slots - len(self._running)
        if free <= 0 or ticket not in self._order()[:free]:
            return False
        self._waiting.remove(ticket)
        self._ordered = None
        self._passed.pop(ticket, None)
        for t in self._waiting:  # tickets count up in arrival order
            if t < ticket:
                self._passed[t] += 1
        now = self._running[ticket] = time.monotonic()
        address, session = self._who[ticket]
        for k in (("a", address), ("s", address, session)):
            self._served.pop(k, None)
            self._served[k] = now
        while len(self._served) > self.SERVED_KEPT:
            self._served.popitem(last=False)
        return True

    def leave(self, ticket: int) -> None:
        """The run ended (or gave up waiting): its slot or its place goes to the next in line."""
        with self._lock:
            began = self._running.pop(ticket, None)
            work = self._work.pop(ticket, 1.0)
            self._who.pop(ticket, None)
            if began is not None:
                self._done.append((time.monotonic() - began, work))
            elif ticket in self._waiting:
                self._waiting.remove(ticket)
                self._ordered = None
            self._passed.pop(ticket, None)
            self._lock.notify_all()

    def rate(self) -> float:
        """Seconds a slot is held per unit of work over the last runs (their seconds over their work, so a short run
        that also loaded the model weighs little), else the typical figure. A run stopped at the cap did only part
        of its work: it counts only as a floor (the rate is at least its seconds over its work)."""
        with self._lock:
            capped = self._capped()
            whole = [(s, w) for s, w in self._done if (s, w) not in capped]
            work = sum(w for _, w in whole)
            rate = sum(s for s, _ in whole) / work if work else self.typical_s_per_unit
            return max([rate] + [s / w for s, w in capped])

    def _capped(self) -> list[tuple[float, float]]:
        """The last runs that were stopped at the cap: (seconds held, work)."""
        return [(s, w) for s, w in self._done if self.cap_s is not None and s >= 0.95 * self.cap_s]

    def overrun_s(self) -> float:
        """How long past the cap the last runs stopped at it held their slot (the round under way when the cap fell,
        then the answer's assembly), 0 before any: a capped run holds its slot for the cap plus this."""
        with self._lock:
            over = [s - self.cap_s for s, _ in self._capped()]
        return max(0.0, sum(over) / len(over)) if over else 0.0

    def hold_s(self, work: float, rate: float | None = None, overrun: float | None = None) -> float:
        """The seconds a run of `work` units is expected to hold its slot: its work at the rate, at most the cap and
        what runs stopped at the cap have taken past it."""
        hold = (self.rate() if rate is None else rate) * max(1.0, float(work))
        if not self.cap_s:
            return hold
        return min(hold, self.cap_s + (self.overrun_s() if overrun is None else overrun))

    def place(self, ticket: int) -> int:
        with self._lock:
            if ticket in self._running:
                return 0
            order = self._order()
            return order.index(ticket) + 1 if ticket in order else 0

    def counts(self) -> tuple[int, int]:
        """(runs decoding, runs waiting)."""
        with self._lock:
            return len(self._running), len(self._waiting)

    def estimate_s(self, ticket: int) -> float:
        """Seconds until this ticket gets a slot: the expected seconds of every run ahead of it in the line
        (`hold_s`), played over the slots after what the running ones have left (0 once running)."""
        rate, over = self.rate(), self.overrun_s()
        now = time.monotonic()
        with self._lock:
            if ticket not in self._waiting:
                return 0.0
            order = self._order()
            ahead = order[: order.index(ticket)]
            # A run past its estimate is taken to end soon (a tenth of it), not never.
            running = [(self.hold_s(self._work[t], rate, over), began) for t, began in self._running.items()]
            free_at = [max(hold - (now - began), 0.1 * hold) for hold, began in running]
            holds = [self.hold_s(self._work[t], rate, over) for t in ahead]
        free_at += [0.0] * max(0, self.slots - len(free_at))
        heapq.heapify(free_at)
        for hold in holds:
            heapq.heappush(free_at, heapq.heappop(free_at) + hold)
        return free_at[0]

    def status(self, ticket: int) -> str:
        """What a waiting run's status line says: its place, the queue, the estimate and what it rests on."""
        place, (running, waiting) = self.place(ticket), self.counts()
        est, rate = self.estimate_s(ticket), self.rate()
        done = len(self._done)
        basis = (
            f"at the speed of the last {done} live run{'s' if done != 1 else ''}"
            if done
            else f"no live run has finished yet: {rate * 3 * 64:.0f} s per 64-token three-lane run is assumed"
        )
        capped = f", each at most {self.cap_s:g} s" if self.cap_s else ""
        return (
            f"Waiting for a live slot: {_ordinal(place)} in line ({running} of {self.slots} slot"
            f"{'s' if self.slots != 1 else ''} decoding, {waiting} waiting); about {est:.0f} s to go ({basis}"
            f"{capped}). Addresses, then tabs, take turns. Stop leaves the queue; recorded examples replay at once "
            f"meanwhile."
        )


LIVE = LiveQueue()
