"""A side-by-side comparison of methods on one prompt: one lane per method on the same prompt and seed, advanced in
turns (one round each), what each emitted token was, and the model cache every comparison shares.

Scheduling and timing: a comparison runs its lanes in one thread, calling each lane's generator once per turn, so
every lane gets one draft-and-verify round in turn and none waits for another to finish. Each event's wall_ms,
draft_ms and verify_ms time that lane's own compute only, so the speed a lane shows is the speed it would get alone
(the other lanes' rounds happen between, not during, its rounds).
"""

from __future__ import annotations

import functools
import math
import sys
import threading
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import methods, settings
from .autobudget import known_budget_choice
from .call_budget import CallBudget, as_budget
from .decoding.config import DecodeConfig, check_messages, check_prompt_tokens
from .decoding.decoder import encode_prompt
from .decoding.detokenizer import Detokenizer, TokenTexts
from .errors import CallStopped, ConfigError, PossError
from .events import DecodeSummary, RoundEvent
from .model_cache import MODELS, ModelCache
from .models.hardware import cuda_available, hardware_info
from .models.numerics import Divergence, classify_divergence, first_difference, numerics_of, plain_margin
from .models.presets import Preset, get_preset

PLAIN = methods.PLAIN  # the plain-decoding lane's method name
MAX_LANES = 3


class RunSpec(settings.ByName):
    """What a comparison runs: the prompt, the methods (one lane each), the preset, and every run setting of the
    settings table (`settings.RUN`: decoding, precision, quantization, fitted budget), read as attributes
    (`spec.depth`). A setting not given reads its declared default. `check()` validates it once: every value typed and
    within its bounds, the methods the preset offers; a saved run records `to_json()`."""

    def __init__(self, prompt: str | list[dict], methods: list[str], preset: str, **values: Any) -> None:
        unknown = sorted(set(values) - set(settings.RUN))
        if unknown:
            raise ConfigError(f"{unknown[0]!r} is not a setting of a comparison: use {', '.join(settings.RUN)}.")
        self.prompt, self.methods, self.preset = prompt, methods, preset
        self.values: dict[str, Any] = {**settings.defaults(settings.RUN), **values}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunSpec) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"RunSpec({self.to_json()!r})"

    def config(self) -> DecodeConfig:
        """The decoding settings, each checked against its declared bounds (ConfigError names a bad field)."""
        return DecodeConfig.of(**{name: self.values[name] for name in settings.DECODE if name in self.values})

    def messages(self) -> list[dict]:
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": self.prompt}]
        return list(self.prompt)

    def check(self) -> "RunSpec":
        """Raise ConfigError (or PromptError) for settings no lane could run with, before anything loads; else type
        every value as the decoder takes it (a slider's 4.0 becomes 4) and return self."""
        self.resolve()
        return self

    def resolve(self) -> "Resolved":
        """Check the spec (as `check` does) and resolve, once, what every step of a run reads: its preset, decoding
        config and offered methods."""
        check_messages(self.prompt)
        if not isinstance(self.methods, list) or not all(isinstance(m, str) for m in self.methods):
            raise ConfigError(f"methods={self.methods!r}: give a list of method names (e.g. plain, eagle, poss2).")
        if not self.methods:
            raise ConfigError("no method chosen: pick two or three (e.g. Plain, EAGLE and POSS-2).")
        if len(self.methods) > MAX_LANES:
            raise ConfigError(f"{len(self.methods)} methods chosen: pick at most {MAX_LANES} lanes.")
        if not isinstance(self.preset, str):
            raise ConfigError(f"preset={self.preset!r}: give a preset's name.")
        self.values = settings.checked(self.values)  # every value typed and in bounds, once
        config = DecodeConfig(**settings.decoding(self.values))  # checked just now: not again through `of`
        preset = get_preset(self.preset)
        offered = methods.lane_methods(preset)
        for m in self.methods:
            if m == methods.ASSISTED:
                methods.get_method(preset, m)  # where the preset has no smaller model: why, and what to use
            if m not in offered:
                raise ConfigError(
                    f"method {m!r} is not available for preset {preset.name!r}: use {', '.join(offered)}."
                )
        if preset.device == "gpu" and not cuda_available():
            raise ConfigError(
                f"preset {preset.name!r} needs a GPU and this machine has none: use smollm2-135m (CPU) or tiny-random."
            )
        return Resolved(self, preset, config, offered)

    def to_json(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "methods": self.methods, "preset": self.preset, **self.values}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "RunSpec":
        """A spec from what `to_json` wrote: settings it lacks read their defaults, names it no longer has are
        dropped."""
        return cls(
            obj.get("prompt"),
            obj.get("methods"),
            obj.get("preset"),
            **{k: v for k, v in obj.items() if k in settings.RUN},
        )


@dataclass(frozen=True)
class Resolved:
    """A checked spec and what it names, resolved once: the preset, the decoding config, the methods it offers."""

    spec: RunSpec
    preset: Preset
    config: DecodeConfig
    offered: dict[str, methods.Method]

    def draft_methods(self) -> list[str]:
        return [m for m in self.spec.methods if methods.uses_draft(m)]

    def target(self, models: ModelCache):
        return models.target(self.preset, self.spec.quantization, self.spec.precision)

    def draft(self, models: ModelCache, method: str, target):
        return models.draft(self.preset, method, target, self.spec.quantization, self.spec.precision)


def resolved(spec: "RunSpec | Resolved") -> Resolved:
    """A run as given when it is resolved already (the app resolves where its input arrives, once per run), else the
    spec checked and resolved now."""
    return spec if isinstance(spec, Resolved) else spec.resolve()


# ----- what each emitted token was ------------------------------------------------------------------------------
@dataclass
class Rejected:
    """A drafted candidate the target turned down, at the position where the round's accepted path ended."""

    text: str
    draft_prob: float
    target_prob: float


@dataclass
class TokenRecord:
    """One emitted token and where it came from."""

    text: str
    round: int
    source: str  # "draft" (accepted draft token) | "bonus" | "corrected" | "prefill" | "plain"
    position: int = 0  # draft position 1..depth for accepted draft tokens; the position it filled for target tokens
    specialist: int | None = None
    draft_prob: float | None = None
    target_prob: float | None = None
    special: bool = False  # EOS and other special tokens: shown as a marker, not as text
    rejected: list[Rejected] = field(default_factory=list)

    @property
    def from_draft(self) -> bool:
        return self.source == "draft"


def rejected_at_end(event: RoundEvent, labels: list[str]) -> list[Rejected]:
    """The drafted children of the last accepted node (or the root) that the target rejected, best draft score first."""
    parent = event.accepted[-1] if event.accepted else -1
    kids = [i for i, n in enumerate(event.nodes) if n.parent == parent]
    kids.sort(key=lambda i: -event.nodes[i].score)
    return [
        Rejected(
            labels[i] if i < len(labels) else str(event.nodes[i].token),
            event.nodes[i].draft_prob,
            event.target_probs[i] if i < len(event.target_probs) else math.nan,
        )
        for i in kids
    ]


def round_records(
    event: RoundEvent, pieces: list[str], labels: list[str], special_ids: set[int] | frozenset[int] = frozenset()
) -> list[TokenRecord]:
    """The records of a round's emitted tokens: accepted draft tokens first, then the target's token.

    `pieces` is each emitted token's text in context, `labels` each drafted node's own text (for rejected tokens)."""
    out = []
    k = event.accept_len
    for i, tok in enumerate(event.tokens):
        text = pieces[i] if i < len(pieces) else ""
        special = tok in special_ids
        if i < k:
            a = event.accepted[i]
            node = event.nodes[a]
            seen = event.draft_observed  # transformers' generate shows accepted candidates, not who drafted them how
            out.append(
                TokenRecord(
                    text,
                    event.round,
                    "draft",
                    i + 1,
                    node.specialist if seen else None,
                    node.draft_prob if seen else None,
                    event.target_probs[a] if a < len(event.target_probs) else None,
                    special,
                )
            )
        elif event.prefill:
            out.append(TokenRecord(text, event.round, "prefill", special=special))
        elif not event.nodes:
            out.append(TokenRecord(text, event.round, "plain", special=special))
        else:
            rejected = rejected_at_end(event, labels)
            out.append(
                TokenRecord(
                    text, event.round, "corrected" if rejected else "bonus", k + 1, special=special, rejected=rejected
                )
            )
    return out


# ----- lanes -----------------------------------------------------------------------------------------------------
@dataclass
class Lane:
    """One method's decode: its events, the text of each token, and where the next round comes from."""

    method: str
    label: str
    trained: bool = True  # False: a random stand-in draft (the registry's flag; the app shows a badge)
    events: list[RoundEvent] = field(default_factory=list)
    pieces: list[list[str]] = field(default_factory=list)  # per round: each emitted token's text in context
    node_texts: list[list[str]] = field(default_factory=list)  # per round: each drafted node's own text
    bonus_texts: list[str] = field(default_factory=list)
    records: list[TokenRecord] = field(default_factory=list)
    summary: dict[str, Any] | None = None  # {"text", "stop_reason", "stats"} once finished
    error: str | None = None
    special_ids: set[int] = field(default_factory=set)
    budget: int | None = None  # the tree budget this lane decodes with (draft lanes)
    budget_auto: bool = False  # chosen by `auto` for this machine
    depth_stop: float = 0.0  # the dynamic depth stop `auto` chose (0: every round drafts the full depth)
    source: Iterator | None = None  # the decoder's generator, or a replay of saved rounds
    detok: Detokenizer | None = None
    token_text: TokenTexts | None = None

    @property
    def plain(self) -> bool:
        return self.method == methods.PLAIN

    @property
    def short(self) -> str:
        """The lane's name in titles and chart legends ("POSS-2"); the label for a method the registry does not know."""
        return methods.short_of(self.method) if methods.color_of(self.method) else self.label

    @property
    def finished(self) -> bool:
        return self.summary is not None or self.error is not None

    @property
    def token_ids(self) -> list[int]:
        return [t for e in self.events for t in e.tokens]

    def held_bytes(self, tensors: bool = True) -> int:
        """An estimate of the memory this lane holds: its rounds (ROUND_BYTES each, NODE_BYTES per drafted node) and,
        with `tensors`, those its open decoder keeps between rounds (its KV caches and the draft's state, by the
        sizes of their storages; a replay's source holds none worth walking)."""
        counted = getattr(self, "_counted", (0, 0))  # (rounds, nodes) counted so far: events are only appended
        if counted[0] != len(self.events):
            counted = (len(self.events), counted[1] + sum(len(e.nodes) for e in self.events[counted[0] :]))
            self._counted = counted
        live = generator_tensor_bytes(self.source) if tensors else 0
        return ROUND_BYTES * counted[0] + NODE_BYTES * counted[1] + live

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events)

    @property
    def stop_reason(self) -> str | None:
        return self.summary["stop_reason"] if self.summary else None

    def add(self, event: RoundEvent, pieces: list[str], node_texts: list[str], bonus_text: str) -> None:
        self.events.append(event)
        self.pieces.append(pieces)
        self.node_texts.append(node_texts)
        self.bonus_texts.append(bonus_text)
        self.records.extend(round_records(event, pieces, node_texts, self.special_ids))

    def take(self, item) -> None:
        """Record one item from the source: a live event, a replayed (event, texts) tuple, or the summary."""
        if isinstance(item, DecodeSummary):
            self.summary = {"text": item.text, "stop_reason": item.stop_reason, "stats": item.stats}
        elif isinstance(item, RoundEvent):
            # Special tokens (EOS, ...) are shown by name, small; the text view leaves them out.
            pieces = [self.token_text(t) if t in self.special_ids else self.detok.push([t]) for t in item.tokens]
            labels = [self.token_text(n.token) for n in item.nodes]
            self.add(item, pieces, labels, self.token_text(item.bonus))
        elif isinstance(item, tuple):
            self.add(*item)
        elif isinstance(item, dict):
            self.summary = item

    def advance(self) -> bool:
        """Run one round; False once the lane has finished (summary, error, or an exhausted source)."""
        if self.finished or self.source is None:
            return False
        try:
            item = next(self.source)
        except StopIteration:
            if self.summary is None:
                self.summary = {"text": self.text, "stop_reason": "cancelled", "stats": {}}
            return False
        except PossError as err:
            self.error = str(err)
            return False
        except Exception as err:  # a bug or a device error: the lane stops with a message, the app keeps serving
            traceback.print_exc(file=sys.stderr)
            self.error = f"{type(err).__name__}: {err}"
            return False
        self.take(item)
        return not self.finished

    def close(self) -> None:
        if self.source is not None and hasattr(self.source, "close"):
            try:
                self.source.close()
            except Exception:  # noqa: BLE001 - closing a broken generator must not hide the real error
                pass
        self.source = None


# What a comparison's rounds hold in memory, for the app's budget of what tabs keep: tracemalloc around loading saved
# tiny-random runs (1,650 to 21,700 nodes, 135 to 207 rounds, three lanes) fits about 240 bytes per drafted node
# (its DraftNode, its label text) and 3.2 to 3.9 KB per round (the event, its token records, texts and deviations),
# 1.6 to 2.1 times the saved file; rounded up here.
NODE_BYTES = 300
ROUND_BYTES = 4000


_NOT_WALKED = ("TargetModel", "Detokenizer", "TokenTexts", "_Stream")  # shared models, texts and token ids


def generator_tensor_bytes(source: Any, limit: int = 20_000) -> int:
    """The bytes of the tensors a paused decoder's generator (and the generators it delegates to) holds in its
    locals, each storage counted once: its KV caches, the draft's state, the committed features. Models and
    tokenizers are not walked (their weights are shared by every lane); at most `limit` objects are visited."""
    import torch

    frame = getattr(source, "gi_frame", None)
    if frame is None:
        return 0
    seen_objs: set[int] = set()
    storages: dict[int, int] = {}
    stack = [v for k, v in frame.f_locals.items() if k != "self"]
    while stack and len(seen_objs) < limit:
        obj = stack.pop()
        if id(obj) in seen_objs or obj is None or isinstance(obj, (str, bytes, int, float, bool, torch.nn.Module)):
            continue
        seen_objs.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if not isinstance(obj, torch.nn.Parameter) and obj.device.type != "meta":
                storage = obj.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        elif hasattr(obj, "gi_frame"):  # a generator this one delegates to (the oracle's rounds)
            if obj.gi_frame is not None:
                stack.extend(v for k, v in obj.gi_frame.f_locals.items() if k != "self")
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            if obj and isinstance(next(iter(obj)), (int, float, str)):
                continue  # token ids and texts: no tensors in them
            stack.extend(obj)
        elif hasattr(obj, "__dict__"):
            kind = type(obj)
            if kind.__name__ in _NOT_WALKED or kind.__module__.startswith(("transformers.tokenization", "tokenizers")):
                continue
            stack.extend(vars(obj).values())
    return sum(storages.values())


@dataclass(eq=False)  # compared (and held in sets) by identity
class Comparison:
    """The lanes of one run (live, stepped or replayed) and the settings they share."""

    spec: RunSpec
    lanes: list[Lane]
    cancel: CallBudget = field(default_factory=CallBudget)  # the call's budget: Stop and the time limit
    hardware: dict[str, str] = field(default_factory=dict)
    replay: bool = False
    prompt_tokens: int = 0
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
        return all(lane.finished or lane.source is None for lane in self.lanes)

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def turn(self) -> bool:
        """Advance every unfinished lane by one round; True while any lane still has rounds to run."""
        alive = False
        for lane in self.lanes:
            if not lane.finished and lane.source is not None:
                alive = lane.advance() or alive
                if lane.finished:
                    lane.close()
        return alive

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
        """After stop(), when nothing is turning the lanes: let each live decoder see the flag and close with its
        cancelled summary; replayed lanes just end."""
        for lane in self.lanes:
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
    spec: RunSpec | Resolved,
    models: ModelCache = MODELS,
    cancel: threading.Event | None = None,
    wait_for_fits: bool = True,
    new_fits: bool = True,
) -> Comparison:
    """Load what the spec needs (from the shared cache), encode the prompt and open one generator per lane. With
    `wait_for_fits=False`, a draft lane whose auto budget another thread is still fitting uses the default budget;
    with `new_fits=False`, so does one whose fit is not cached yet (a public server offers only the fits it has).

    `cancel` is the call's budget (a CallBudget, or an Event it follows): each load is checked against it before and
    after, a fit and the oracle's reference decode stop within one round of it (CallStopped), and the lanes watch it
    before each round. Raises a PossError with a readable message for bad settings, an empty or too long prompt, a
    missing draft, a model that fails to load, or a call stopped meanwhile."""
    run = resolved(spec)
    spec = run.spec
    budget = as_budget(cancel)
    budget.check("waiting to start")
    target = run.target(models)
    budget.check(f"loading {run.preset.name}")
    ids = encode_prompt(target.tokenizer, spec.messages())
    check_prompt_tokens(len(ids), target.max_context)
    special = set(getattr(target.tokenizer, "all_special_ids", []) or []) | set(target.eos_ids)
    lanes = []
    try:
        for name in spec.methods:
            lanes.append(_open_lane(run, name, models, target, ids, special, budget, wait_for_fits, new_fits))
    except BaseException:
        for lane in lanes:
            lane.close()
        raise
    comparison = Comparison(
        spec,
        lanes,
        budget,
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
    budget: CallBudget,
    wait_for_fits: bool,
    new_fits: bool,
) -> Lane:
    """One lane of `start`: its models (loaded or fitted under the call's budget) and its decoder's generator."""
    spec, method, config = run.spec, run.offered[name], run.config
    lane_budget, lane_config, draft, assistant, auto = None, config, None, None, False
    if method.oracle:
        lane_config = methods.oracle_config(config) if spec.auto_budget else config
        lane_budget, auto = lane_config.tree_budget, spec.auto_budget
    elif method.assistant:
        assistant = models.assistant(run.preset, name, target, spec.quantization, spec.precision)
        budget.check(f"loading the assistant of {run.preset.name}")
    elif methods.uses_draft(name):
        draft = run.draft(models, name, target)
        budget.check(f"loading the draft {name!r}")
        auto = spec.auto_budget and fit_offered(models, target, draft, config, wait_for_fits, new_fits)
        if auto:
            try:
                choice = models.budget(target, draft, config, cancel=budget)
            except CallStopped:
                raise budget.stopped(f"fitting the tree budget of {method.label}") from None
            lane_config = methods.with_budget_choice(config, choice)
        lane_budget = lane_config.tree_budget
    decoder = methods.build_decoder(method, target, lane_config, draft, assistant)
    source = decoder.generate(ids, cancel=budget)  # the oracle's reference decode runs here, under the budget
    budget.check(f"preparing the {method.label} lane")
    return Lane(
        name,
        method.label,
        method.trained,
        special_ids=special,
        budget=lane_budget,
        depth_stop=lane_config.depth_stop,
        budget_auto=auto and lane_budget is not None,
        source=source,
        detok=Detokenizer(target.tokenizer),
        token_text=TokenTexts(target.tokenizer),
    )


def fit_offered(
    models: ModelCache, target, draft, config: DecodeConfig, wait_for_fits: bool = True, new_fits: bool = True
) -> bool:
    """Whether a draft lane asking for an auto budget gets one now: a cached fit always; a new fit only with
    `new_fits` and, without `wait_for_fits`, when no other thread is fitting it (else: the default budget)."""
    if known_budget_choice(target, draft, config) is not None:
        return True
    return new_fits and (wait_for_fits or not models.fitting_elsewhere(target, draft, config))


# Live comparisons (started, not yet closed), weakly held: what `live_comparisons` reports to tests and the load test
# (after every call has ended, none should be left decoding).
_LIVE: "weakref.WeakSet[Comparison]" = weakref.WeakSet()


def live_comparisons() -> list[Comparison]:
    """Comparisons whose decoders are still open (running, or paused between Steps)."""
    return [c for c in list(_LIVE) if any(lane.source is not None for lane in c.lanes)]


def fit_budgets(
    spec: RunSpec | Resolved,
    models: ModelCache = MODELS,
    wait_for_fits: bool = True,
    new_fits: bool = True,
    cancel: threading.Event | None = None,
) -> Iterator[str]:
    """Before `start` with auto_budget: load the models and fit each draft lane's budget, yielding a status line
    before each step that may take a while (the first calibration of a draft on a CPU takes tens of seconds; later
    ones read the cache). With `wait_for_fits=False`, a fit another thread has under way is not waited for, and with
    `new_fits=False` no fit is started: the status says the lane starts on the default budget. `cancel` (the call's
    budget) stops a fit within one round with CallStopped."""
    run = resolved(spec)
    if not run.spec.auto_budget:
        return
    budget, config = as_budget(cancel), run.config
    target = run.target(models)
    for method in run.draft_methods():
        budget.check(f"loading the draft {method!r}")
        draft = run.draft(models, method, target)
        label = methods.label_of(method, run.preset)
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
            try:
                models.budget(target, draft, config, cancel=budget)
            except CallStopped:
                raise budget.stopped(f"fitting the tree budget of {label}") from None


def prefit_budgets(spec: RunSpec | Resolved, models: ModelCache = MODELS) -> None:
    """Fit every draft lane's auto budget now, one after another (the app does it at start-up, in the background).
    All of them count as under way from the start, so a Run that comes meanwhile starts on the default budgets
    (`wait_for_fits=False`) instead of waiting for calibrations it did not ask for (the app also sets
    `models.startup_fit` from before it loads anything until this returns)."""
    run = resolved(spec)
    target = run.target(models)
    models.fit_budgets_in_turn(target, [run.draft(models, m, target) for m in run.draft_methods()], run.config)


def run_to_end(comparison: Comparison, time_limit_s: float | None = None) -> Comparison:
    """Turn until every lane has finished (the API endpoint's non-streaming run). Past the call's budget (its own
    time limit, or `time_limit_s` from when the call began) the comparison is stopped (each lane ends with a
    "cancelled" summary) and `comparison.timed_out` says so; a stop from elsewhere (`comparison.stop()`, e.g. a
    cancelled API call) ends it before the next round."""
    budget = comparison.cancel
    if time_limit_s is not None and isinstance(budget, CallBudget):
        budget.limit(time_limit_s)
    try:
        while comparison.turn():
            pass
        if comparison.cancelled:
            comparison.drain()
    finally:
        comparison.close()
    return comparison
