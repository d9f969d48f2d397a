"""A side-by-side comparison of methods on one prompt: one lane per method on the same prompt and seed, from a run
resolved once (`run_spec.Resolved`) and the model cache every comparison shares.

Scheduling and timing: a comparison runs its lanes in one thread, one round at a time, so no two rounds ever share
the CPU. Each event's wall_ms, draft_ms and verify_ms time that lane's own compute only, so the speed a lane shows is
the speed it would get alone (the other lanes' rounds happen between, not during, its rounds).

Two ways to advance: `race` (Run, a replay) is a race in time: the next round goes to the lane that has spent the
least of its own time, and a lane shows a round only once the race's clock (`clock_ms`, the least time a lane still
decoding has spent) has reached that round's end. At every moment on screen each lane has spent the same time, to
within one round, so token counts stand in the ratio of the lanes' speeds and lanes finish in the order of their
speed-ups. `step_round` (Step) gives every lane one round and shows it at once.

A lane (lanes.py) is one method's decode and its own clock; this module holds what spans the lanes: the race, the
speed-ups and divergences between them, and how a comparison starts (`start`, after `fit_budgets` where the run
asks for fitted tree budgets) and runs to its end (`run_to_end`).
"""

from __future__ import annotations

import functools
import math
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..autobudget import known_budget_choice
from ..base.errors import CallStopped
from ..decoding.config import DecodeConfig, check_prompt_tokens
from ..decoding.decoder import encode_prompt
from ..decoding.detokenizer import Detokenizer, TokenTexts
from ..models.hardware import hardware_info
from ..models.numerics import Divergence, classify_divergence, first_difference, numerics_of, plain_margin
from ..rounds import metrics
from . import methods
from .call_cap import CallCap, as_cap
from .held_memory import NODE_BYTES, ROUND_BYTES  # noqa: F401 - the app reads them here
from .lanes import Lane
from .model_cache import MODELS, ModelCache
from .run_spec import Resolved, RunSpec

PLAIN = methods.PLAIN  # the plain-decoding lane's method name


@dataclass(eq=False)  # compared (and held in sets) by identity
class Comparison:
    """The lanes of one run (live, stepped or replayed) and the settings they share."""

    spec: RunSpec
    lanes: list[Lane]
    cancel: CallCap = field(default_factory=CallCap)  # the call's Stop flag and time cap
    hardware: dict[str, str] = field(default_factory=dict)
    replay: bool = False
    prompt_tokens: int = 0
    stepped: bool = False  # advanced by `step_round` (Step): round for round, not on one clock
    race_ms: float = 0.0  # the race's clock as the lanes last showed it (`race`)
    # (plain tokens, index, lane's token) -> the plain target's logit margin there; None where no target is at hand
    # (replays, loaded runs)
    margin_probe: Callable[[list[int], int, int], float] | None = None
    _divergences: dict[tuple[str, int], Divergence] = field(default_factory=dict, repr=False)

    @property
    def timed_out(self) -> bool:
        """Stopped by the per-call time limit, not by the user."""
        return bool(getattr(self.cancel, "timed_out", False))

    @property
    def finished(self) -> bool:
        return all(lane.finished or (lane.source is None and not lane.ahead) for lane in self.lanes)

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def step_round(self) -> bool:
        """Advance every unfinished lane by one round, shown at once (Step: the lanes are then round for round, not
        on one clock); True while any lane still has rounds to run."""
        alive, self.stepped = False, True
        for lane in self.lanes:
            if not lane.finished and (lane.source is not None or lane.ahead):
                alive = lane.advance() or alive
                if lane.decoded_all:
                    lane.close()
        self._freeze_speedups()
        return alive

    @property
    def clock_ms(self) -> float:
        """The race's clock: the least own time a lane still decoding has spent; once none is, the most any spent."""
        running = [lane.spent_ms for lane in self.lanes if lane.decoding]
        return min(running) if running else max((lane.spent_ms for lane in self.lanes), default=0.0)

    def next_lane(self) -> Lane | None:
        """The lane the race runs next: of those still decoding, the one that has spent the least of its own time."""
        return min((lane for lane in self.lanes if lane.decoding), key=lambda lane: lane.spent_ms, default=None)

    def race(self, until_ms: float = math.inf) -> bool:
        """One step of the race in time: decode one round of `next_lane` (when its time is short of `until_ms`, the
        replay's clock), then show every lane up to the race's clock (and `until_ms`). True while any lane has
        rounds to decode or to show."""
        lane = self.next_lane()
        if lane is not None and lane.spent_ms < until_ms:
            lane.decode()
            if lane.decoded_all:
                lane.close()
        clock = self.race_ms = min(self.clock_ms, until_ms)
        for each in self.lanes:
            each.show_until(clock)
        self._freeze_speedups()
        return not self.finished

    def due_ms(self) -> float | None:
        """When, on the race's clock, the race next has something to do: a lane's next round to decode, or a
        decoded one to show; None when nothing is left."""
        times = [lane.spent_ms for lane in self.lanes if lane.decoding]
        times += [lane.ahead[0][0] for lane in self.lanes if lane.ahead]
        return min(times, default=None)

    def speedup(self, lane: Lane) -> float | None:
        """A lane's speed-up over the plain lane from the rounds both show (tokens per own second), frozen when the
        lane finished; None for the plain lane, without one, or before both have run a round past the prefill."""
        if lane.speedup_at_end is not None:
            return lane.speedup_at_end
        plain = self.lane(methods.PLAIN)
        if (
            plain is None
            or lane is plain
            or not (metrics.draft_rounds(lane.events) and metrics.draft_rounds(plain.events))
        ):
            return None
        up = metrics.speedup(metrics.tokens_per_s(lane.events), metrics.tokens_per_s(plain.events))
        return None if math.isnan(up) else up

    def _freeze_speedups(self) -> None:
        for lane in self.lanes:
            if lane.finished and lane.speedup_at_end is None and not lane.error:
                lane.speedup_at_end = self.speedup(lane)

    def held_bytes(self) -> int:
        """An estimate of the memory this comparison holds (`Lane.held_bytes`, every lane)."""
        return sum(lane.held_bytes(tensors=not self.replay) for lane in self.lanes)

    def close(self) -> None:
        """Close every lane's decoder (its caches are freed with it)."""
        for lane in self.lanes:
            lane.close()

    def stop(self) -> None:
        """Cancel every lane at once: each decoder sees the flag before its next round and closes with a summary."""
        self.cancel.set()

    def drain(self) -> None:
        """After stop(), when nothing is turning the lanes: show what each lane decoded, let each live decoder see
        the flag and close with its cancelled summary; replayed lanes just end (what they have not shown is not)."""
        for lane in self.lanes:
            if self.replay:
                lane.ahead.clear()
            if not lane.finished and not self.replay:
                lane.advance()
            if not lane.finished:
                lane.summary = {"text": lane.text, "stop_reason": "cancelled", "stats": {}}
        self.close()

    def lane(self, method: str) -> Lane | None:
        return next((lane for lane in self.lanes if lane.method == method), None)

    def divergence(self, lane: Lane) -> Divergence | None:
        """Where `lane` first parts from the plain lane (None: it has not, as far as both have gone), classified by
        the target's numerics with the plain target's logit margin there (measured once per lane and index, untimed;
        not measured for a replay)."""
        plain = self.lane(methods.PLAIN)
        if plain is None or lane is plain:
            return None
        want, got = plain.token_ids, lane.token_ids
        i = first_difference(got, want)
        if i is None:
            return None
        key = (lane.method, i)
        if key not in self._divergences:
            margin = None
            if self.margin_probe is not None:
                try:
                    margin = self.margin_probe(want, i, got[i])
                except Exception as err:  # noqa: BLE001 - the badge then says the margin was not measured
                    print(f"[poss] margin at token {i} not measured: {type(err).__name__}: {err}", file=sys.stderr)
            self._divergences[key] = classify_divergence(i, margin, numerics_of(self.hardware))
        return self._divergences[key]


def start(
    run: Resolved,
    models: ModelCache = MODELS,
    cancel: threading.Event | None = None,
    wait_for_fits: bool = True,
    new_fits: bool = True,
) -> Comparison:
    """Load what the run needs (from the shared cache), encode the prompt and open one generator per lane. With
    `wait_for_fits=False`, a draft lane whose auto tree budget another thread is still fitting uses the default tree
    budget; with `new_fits=False`, so does one whose fit is not cached yet (a public server offers only the fits it
    has).

    `cancel` is the call's Stop flag and time cap (a CallCap, or an Event it follows): each load is checked
    against it before and after, a fit and the oracle's reference decode stop within one round of it (CallStopped),
    and the lanes watch it before each round. Raises a PossError with a readable message for a too long prompt, a
    missing draft, a model that fails to load, or a call stopped meanwhile (the settings were checked when the run
    was resolved)."""
    spec = run.spec
    call = as_cap(cancel)
    call.check("waiting to start")
    target = run.target(models)
    call.check(f"loading {run.preset.name}")
    ids = encode_prompt(target.tokenizer, spec.messages())
    check_prompt_tokens(len(ids), target.max_context)
    special = set(getattr(target.tokenizer, "all_special_ids", []) or []) | set(target.eos_ids)
    lanes = []
    try:
        for name in spec.methods:
            lanes.append(_open_lane(run, name, models, target, ids, special, call, wait_for_fits, new_fits))
    except BaseException:
        for lane in lanes:
            lane.close()
        raise
    comparison = Comparison(
        spec,
        lanes,
        call,
        hardware_info(target),
        prompt_tokens=len(ids),
        margin_probe=functools.partial(plain_margin, target, ids),
    )
    _LIVE.add(comparison)
    return comparison


def _open_lane(
    run: Resolved,
    name: str,
    models: ModelCache,
    target,
    ids: list[int],
    special: set[int],
    call: CallCap,
    wait_for_fits: bool,
    new_fits: bool,
) -> Lane:
    """One lane of `start`: its models (loaded or fitted within the call's time cap) and its decoder's generator."""
    spec, method, config = run.spec, run.offered[name], run.config
    tree_budget, lane_config, draft, assistant, auto = None, config, None, None, False
    if method.oracle:
        lane_config = methods.oracle_config(config) if spec.auto_budget else config
        tree_budget, auto = lane_config.tree_budget, spec.auto_budget
    elif method.assistant:
        assistant = run.assistant(models, method, target)
        call.check(f"loading the assistant of {run.preset.name}")
    elif methods.uses_draft(name):
        draft = run.draft(models, method, target)
        call.check(f"loading the draft {name!r}")
        auto = spec.auto_budget and fit_offered(models, target, draft, config, wait_for_fits, new_fits)
        if auto:
            lane_config = methods.with_budget_choice(config, _fit(models, target, draft, config, call, method.label))
        tree_budget = lane_config.tree_budget
    decoder = methods.build_decoder(method, target, lane_config, draft, assistant)
    source = decoder.generate(ids, cancel=call)  # the oracle's reference decode runs here, within the call's cap
    call.check(f"preparing the {method.label} lane")
    return Lane(
        name,
        method.label,
        method.trained,
        special_ids=special,
        tree_budget=tree_budget,
        depth_stop=lane_config.depth_stop,
        budget_auto=auto and tree_budget is not None,
        source=source,
        detok=Detokenizer(target.tokenizer),
        token_text=TokenTexts(target.tokenizer),
    )


def fit_offered(
    models: ModelCache, target, draft, config: DecodeConfig, wait_for_fits: bool = True, new_fits: bool = True
) -> bool:
    """Whether a draft lane asking for an auto tree budget gets one now: a cached fit always; a new fit only with
    `new_fits` and, without `wait_for_fits`, when no other thread is fitting it (else: the default tree budget)."""
    if known_budget_choice(target, draft, config) is not None:
        return True
    return new_fits and (wait_for_fits or not models.fitting_elsewhere(target, draft, config))


def _fit(models: ModelCache, target, draft, config: DecodeConfig, call: CallCap, label: str):
    """The draft's tree budget fitted to this machine (or read from the cache), stopped within one round when the
    call is (a PossError naming what was under way)."""
    try:
        return models.budget(target, draft, config, cancel=call)
    except CallStopped:
        raise call.stopped(f"fitting the tree budget of {label}") from None


# Live comparisons (started, not yet closed), weakly held: what `live_comparisons` reports to tests and the load test
# (after every call has ended, none should be left decoding).
_LIVE: "weakref.WeakSet[Comparison]" = weakref.WeakSet()


def live_comparisons() -> list[Comparison]:
    """Comparisons whose decoders are still open (running, or paused between Steps)."""
    return [c for c in list(_LIVE) if any(lane.source is not None for lane in c.lanes)]


def fit_budgets(
    run: Resolved,
    models: ModelCache = MODELS,
    wait_for_fits: bool = True,
    new_fits: bool = True,
    cancel: threading.Event | None = None,
) -> Iterator[str]:
    """Before `start` with auto_budget: load the models and fit each draft lane's tree budget, yielding a status
    line before each step that may take a while (the first calibration of a draft on a CPU takes tens of seconds;
    later ones read the cache). With `wait_for_fits=False`, a fit another thread has under way is not waited for,
    and with `new_fits=False` no fit is started: the status says the lane starts on the default tree budget.
    `cancel` (the call's Stop flag and time cap) stops a fit within one round with CallStopped."""
    if not run.spec.auto_budget:
        return
    call, config = as_cap(cancel), run.config
    target = run.target(models)
    for method in run.draft_methods():
        call.check(f"loading the draft {method.name!r}")
        draft = run.draft(models, method, target)
        label = method.label
        if known_budget_choice(target, draft, config) is not None:
            continue
        if not new_fits:
            yield (
                f"{label} starts on the default tree budget ({config.tree_budget}): this server fits tree budgets "
                f"only at start-up, and none is cached for depth {config.depth} and top-k {config.top_k}."
            )
        elif not wait_for_fits and models.fitting_elsewhere(target, draft, config):
            yield (
                f"{label} starts on the default tree budget ({config.tree_budget}) while the app fits tree budgets "
                f"to this machine in the background; later runs use the fit."
            )
        else:
            yield f"Fitting the tree budget of {label} to this machine (once per draft and setting, then cached)…"
            _fit(models, target, draft, config, call, label)


def prefit_budgets(run: Resolved, models: ModelCache = MODELS) -> None:
    """Fit every draft lane's auto tree budget now, one after another (the app does it at start-up, in the
    background). All of them count as under way from the start, so a Run that comes meanwhile starts on the default
    tree budgets (`wait_for_fits=False`) instead of waiting for calibrations it did not ask for (the app also sets
    `models.startup_fit` from before it loads anything until this returns)."""
    target = run.target(models)
    models.fit_budgets_in_turn(target, [run.draft(models, m, target) for m in run.draft_methods()], run.config)


def run_to_end(comparison: Comparison, time_limit_s: float | None = None) -> Comparison:
    """Race until every lane has finished (the API endpoint's non-streaming run). Past the call's time cap (its own
    time limit, or `time_limit_s` from when the call began) the comparison is stopped (each lane ends with a
    "cancelled" summary) and `comparison.timed_out` says so; a stop from elsewhere (`comparison.stop()`, e.g. a
    cancelled API call) ends it before the next round."""
    call = comparison.cancel
    if time_limit_s is not None and isinstance(call, CallCap):
        call.limit(time_limit_s)
    try:
        while comparison.race():
            pass
        if comparison.cancelled:
            comparison.drain()
    finally:
        comparison.close()
    return comparison
