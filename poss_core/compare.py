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
import platform
import sys
import threading
import time
import traceback
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from . import methods
from .autobudget import cached_budget_choice, known_budget_choice
from .decoding.config import DecodeConfig, check_messages, check_prompt_tokens
from .decoding.decoder import encode_prompt
from .decoding.detokenizer import Detokenizer, TokenTexts
from .errors import CallStopped, ConfigError, ModelLoadError, PossError
from .events import DecodeSummary, RoundEvent
from .models import loading
from .models.numerics import Divergence, classify_divergence, first_difference, numerics_of, plain_margin
from .models.presets import Preset, get_preset

PLAIN = methods.PLAIN  # the plain-decoding lane's method name
MAX_LANES = 3
QUANTIZATIONS = ("auto", "none", "8bit", "4bit")
# The target's precision per run: auto = the device's default (fp32 on a CPU, where every lane is identical to plain
# decoding token for token; bf16 on GPUs), or one chosen in the app's settings (bf16 is faster on CPUs with bf16 units).
PRECISIONS = ("auto", "float32", "bfloat16", "float16")  # float16 is offered on GPUs only (slow on CPUs)


def cuda_available() -> bool:
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch build with CUDA is just "no GPU"
        return False


def cpu_bf16_units() -> str | None:
    """The CPU's native bf16 instructions ("AMX" or "AVX-512 BF16"), or None: where bf16 is faster than fp32 here."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:  # not Linux: no cheap way to tell, so make no claim
        return None
    if "amx_bf16" in flags:
        return "AMX"
    return "AVX-512 BF16" if "avx512_bf16" in flags else None


class CallBudget(threading.Event):
    """One call's budget: a cancel flag that Stop, a closed tab or a dropped client sets, and that sets itself once
    `seconds` have passed since the call began (its clock runs from creation: loads, fits, the oracle's reference
    decode and the lanes' rounds all count). Everything the call starts checks `is_set()` between rounds, so the
    call ends within one round of either. A `parent` Event (a cancelled API call) sets it too."""

    def __init__(self, seconds: float | None = None, parent: threading.Event | None = None) -> None:
        super().__init__()
        self.seconds = seconds
        self.parent = parent
        self.began = time.monotonic()
        self.timed_out = False  # set by the clock, not by a stop

    def restart(self, seconds: float | None) -> None:
        """Start the clock again, now, with `seconds` (a call that waited its turn in the app's queue of live runs
        begins its cap when it gets its slot: waiting is not decoding)."""
        self.began = time.monotonic()
        self.seconds = seconds

    def limit(self, seconds: float | None) -> None:
        """Give a budget without a time limit one (its clock still runs from the call's start)."""
        if self.seconds is None:
            self.seconds = seconds

    def is_set(self) -> bool:
        if not super().is_set():
            if self.seconds is not None and time.monotonic() - self.began > self.seconds:
                self.timed_out = True
                self.set()
            elif self.parent is not None and self.parent.is_set():
                self.set()
        return super().is_set()

    def check(self, doing: str) -> None:
        """Raise CallStopped, saying why and while doing what, once the call was stopped or ran out of time."""
        if self.is_set():
            raise self.stopped(doing)

    def stopped(self, doing: str) -> CallStopped:
        if self.timed_out:
            return CallStopped(f"Stopped at this server's limit of {self.seconds:g} s per call while {doing}: ask "
                               f"for fewer new tokens, a smaller tree or a fixed tree budget.")
        return CallStopped(f"Stopped while {doing}: nothing was kept. Run again whenever you like.")


def as_budget(cancel: threading.Event | None) -> CallBudget:
    """`cancel` as a call's budget: itself, or a budget without a time limit that follows it."""
    return cancel if isinstance(cancel, CallBudget) else CallBudget(parent=cancel)


class ModelCache:
    """Targets and drafts loaded once and shared by every session; one lock per model so sessions loading
    different models do not wait on each other. Keeps at most `max_targets` targets (and their drafts)."""

    def __init__(self, max_targets: int = 2) -> None:
        self.max_targets = max_targets
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}
        self._targets: OrderedDict[tuple, Any] = OrderedDict()
        self._drafts: dict[tuple, Any] = {}
        self._fitting: set[tuple] = set()  # budget fits under way (e.g. the app's start-up fit)
        self.startup_fit = threading.Event()  # set while the app's start-up loads and fits (see prefit_budgets)
        self.dtype = None  # the precision "auto" stands for (None: the device's default)

    def _target_key(self, preset: Preset, quantization: str, precision: str) -> tuple:
        dtype = self.dtype if precision in (None, "", "auto") else loading.parse_dtype(precision)
        return (preset.target, quantization, dtype)

    def _key_lock(self, key: tuple) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def target(self, preset: Preset, quantization: str = "auto", precision: str = "auto"):
        key = self._target_key(preset, quantization, precision)
        with self._key_lock(key):
            with self._lock:
                if key in self._targets:
                    self._targets.move_to_end(key)
                    return self._targets[key]
            try:
                target = loading.load_preset_target(preset.target, quantization=quantization, dtype=key[2])
            except PossError:
                raise
            except Exception as err:  # out of memory, missing packages, broken files: one readable line
                raise ModelLoadError(f"could not load {preset.name!r}: {type(err).__name__}: "
                                     f"{str(err).splitlines()[0] if str(err) else ''}") from err
            with self._lock:
                self._targets[key] = target
                while len(self._targets) > self.max_targets:
                    old, _ = self._targets.popitem(last=False)
                    for dk in [k for k in self._drafts if k[:3] == old]:
                        del self._drafts[dk]
            return target

    def draft(self, preset: Preset, method: str, target, quantization: str = "auto", precision: str = "auto"):
        m = methods.get_method(preset, method)
        ref = m.draft
        key = (*self._target_key(preset, quantization, precision), ref.source, preset.depth,
               ref.positions_per_specialist)
        return self._beside_target(key, lambda: methods.load_draft(m, target, preset.depth),
                                   f"draft {method!r} of {preset.name!r}")

    def assistant(self, preset: Preset, method: str, target, quantization: str = "auto", precision: str = "auto"):
        """The assisted method's smaller model, loaded once per target and kept (and evicted) with its drafts."""
        m = methods.get_method(preset, method)
        key = (*self._target_key(preset, quantization, precision), "assistant", m.assistant)
        return self._beside_target(key, lambda: methods.load_assistant(m, target, quantization),
                                   f"the assistant {m.assistant!r} of {preset.name!r}")

    def _beside_target(self, key: tuple, load, what: str):
        """A model that belongs to a loaded target (its key starts with the target's): loaded once, one load per
        key at a time, evicted with the target; a failure becomes one readable line."""
        with self._key_lock(key):
            with self._lock:
                if key in self._drafts:
                    return self._drafts[key]
            try:
                model = load()
            except PossError:
                raise
            except Exception as err:
                raise ModelLoadError(f"could not load {what}: {type(err).__name__}: "
                                     f"{str(err).splitlines()[0] if str(err) else ''}") from err
            with self._lock:
                self._drafts[key] = model
            return model

    def budget(self, target, draft, config: DecodeConfig, log=None, cancel: threading.Event | None = None):
        """The tree budget fitted to this machine for `draft` at the config's depth and top_k (calibrated once per
        machine and cached on disk; one calibration at a time per draft). With `cancel` (a call's budget), waiting
        for another fit and the fit itself stop within one round once it is set (CallStopped; nothing is cached)."""
        key = self._budget_key(draft, config)
        with self._lock:
            self._fitting.add(key)
        lock = self._key_lock(key)
        try:
            while not lock.acquire(timeout=0.1):
                if cancel is not None and cancel.is_set():
                    raise CallStopped("waiting for another tree-budget fit")
            try:
                return cached_budget_choice(target, draft, config, log=log, cancel=cancel)
            finally:
                lock.release()
        finally:
            with self._lock:
                self._fitting.discard(key)

    def fit_budgets_in_turn(self, target, drafts: list, config: DecodeConfig) -> None:
        """Fit each draft's budget, one after another, all counting as under way from the start (`fitting_elsewhere`
        is then true for every one of them until its own fit is cached)."""
        keys = {self._budget_key(d, config) for d in drafts}
        with self._lock:
            self._fitting.update(keys)
        try:
            for draft in drafts:
                self.budget(target, draft, config)
        finally:
            with self._lock:
                self._fitting.difference_update(keys)

    @staticmethod
    def _budget_key(draft, config: DecodeConfig) -> tuple:
        # Drafts are shared objects of this cache, so their identity names them (no need to hash the weights).
        return ("budget", id(draft), config.depth, config.top_k)

    def fitting_elsewhere(self, target, draft, config: DecodeConfig) -> bool:
        """True while another thread fits this draft's budget and no choice is cached yet: a run that should not
        wait for it (the app's first Run during its start-up fit) uses the default budget instead."""
        with self._lock:
            busy = self._budget_key(draft, config) in self._fitting or self.startup_fit.is_set()
        return busy and known_budget_choice(target, draft, config) is None

    def loaded_targets(self) -> list:
        with self._lock:
            return list(self._targets.values())


MODELS = ModelCache()


@dataclass
class RunSpec:
    """What a comparison runs: the settings a saved run records."""

    prompt: str | list[dict]
    methods: list[str]
    preset: str
    temperature: float = 0.0
    top_p: float = 1.0
    depth: int = 6
    top_k: int = 10
    tree_budget: int = 60
    max_new_tokens: int = 64
    seed: int = 0
    quantization: str = "auto"
    auto_budget: bool = False  # each draft lane's budget fitted to this machine (tree_budget is then ignored)
    precision: str = "auto"  # the target's dtype (PRECISIONS); saved runs from before it was a setting read "auto"

    def __post_init__(self) -> None:
        if isinstance(self.methods, (list, tuple)):
            self.methods = [methods.canonical(m) if isinstance(m, str) else m for m in self.methods]

    def config(self) -> DecodeConfig:
        """The decoding settings, checked against `decoding.config.LIMITS` (ConfigError names a bad field)."""
        return DecodeConfig.of(depth=self.depth, top_k=self.top_k, tree_budget=self.tree_budget,
                               temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens,
                               seed=self.seed)

    def messages(self) -> list[dict]:
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": self.prompt}]
        return list(self.prompt)

    def check(self) -> None:
        """Raise ConfigError (or PromptError) for settings no lane could run with, before anything loads."""
        check_messages(self.prompt)
        if not isinstance(self.methods, list) or not all(isinstance(m, str) for m in self.methods):
            raise ConfigError(f"methods={self.methods!r}: give a list of method names (e.g. plain, eagle, poss2).")
        if not self.methods:
            raise ConfigError("no method chosen: pick two or three (e.g. Plain, EAGLE and POSS-2).")
        if len(self.methods) > MAX_LANES:
            raise ConfigError(f"{len(self.methods)} methods chosen: pick at most {MAX_LANES} lanes.")
        if not isinstance(self.preset, str):
            raise ConfigError(f"preset={self.preset!r}: give a preset's name.")
        if not isinstance(self.auto_budget, bool):
            raise ConfigError(f"auto_budget={self.auto_budget!r}: use true or false.")
        if self.quantization not in QUANTIZATIONS:
            raise ConfigError(f"quantization={self.quantization!r}: use one of {', '.join(QUANTIZATIONS)}.")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision={self.precision!r}: use one of {', '.join(PRECISIONS)}.")
        self.config()
        preset = get_preset(self.preset)
        offered = methods.lane_methods(preset)
        for m in self.methods:
            if m == methods.ASSISTED:
                methods.get_method(preset, m)  # where the preset has no smaller model: why, and what to use
            if m not in offered:
                raise ConfigError(f"method {m!r} is not available for preset {preset.name!r}: use "
                                  f"{', '.join(offered)}.")
        if preset.device == "gpu" and not cuda_available():
            raise ConfigError(f"preset {preset.name!r} needs a GPU and this machine has none: use smollm2-135m "
                              f"(CPU) or tiny-random.")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "RunSpec":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in obj.items() if k in known})


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
    return [Rejected(labels[i] if i < len(labels) else str(event.nodes[i].token), event.nodes[i].draft_prob,
                     event.target_probs[i] if i < len(event.target_probs) else math.nan) for i in kids]


def round_records(event: RoundEvent, pieces: list[str], labels: list[str],
                  special_ids: set[int] | frozenset[int] = frozenset()) -> list[TokenRecord]:
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
            out.append(TokenRecord(text, event.round, "draft", i + 1, node.specialist if seen else None,
                                   node.draft_prob if seen else None,
                                   event.target_probs[a] if a < len(event.target_probs) else None, special))
        elif event.prefill:
            out.append(TokenRecord(text, event.round, "prefill", special=special))
        elif not event.nodes:
            out.append(TokenRecord(text, event.round, "plain", special=special))
        else:
            rejected = rejected_at_end(event, labels)
            out.append(TokenRecord(text, event.round, "corrected" if rejected else "bonus", k + 1, special=special,
                                   rejected=rejected))
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


def hardware_info(target) -> dict[str, str]:
    device = str(target.device)
    if target.device.type == "cuda":
        device += f" ({torch.cuda.get_device_name(target.device)})"
    else:
        device += f" ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return {"model": str(target.name), "device": device, "dtype": str(target.dtype).replace("torch.", ""),
            "quantization": str(target.quantization), "context": str(target.max_context),
            "torch": torch.__version__}


def start(spec: RunSpec, models: ModelCache = MODELS, cancel: threading.Event | None = None,
          wait_for_fits: bool = True, new_fits: bool = True) -> Comparison:
    """Load what the spec needs (from the shared cache), encode the prompt and open one generator per lane. With
    `wait_for_fits=False`, a draft lane whose auto budget another thread is still fitting uses the default budget;
    with `new_fits=False`, so does one whose fit is not cached yet (a public server offers only the fits it has).

    `cancel` is the call's budget (a CallBudget, or an Event it follows): each load is checked against it before and
    after, a fit and the oracle's reference decode stop within one round of it (CallStopped), and the lanes watch it
    before each round. Raises a PossError with a readable message for bad settings, an empty or too long prompt, a
    missing draft, a model that fails to load, or a call stopped meanwhile."""
    spec.check()
    budget = as_budget(cancel)
    preset = get_preset(spec.preset)
    config = spec.config()
    budget.check("waiting to start")
    target = models.target(preset, spec.quantization, spec.precision)
    budget.check(f"loading {preset.name}")
    ids = encode_prompt(target.tokenizer, spec.messages())
    check_prompt_tokens(len(ids), target.max_context)
    special = set(getattr(target.tokenizer, "all_special_ids", []) or []) | set(target.eos_ids)
    offered = methods.lane_methods(preset)
    lanes = []
    try:
        for name in spec.methods:
            lanes.append(_open_lane(spec, name, offered[name], models, preset, target, config, ids, special, budget,
                                    wait_for_fits, new_fits))
    except BaseException:
        for lane in lanes:
            lane.close()
        raise
    comparison = Comparison(spec, lanes, budget, hardware_info(target), prompt_tokens=len(ids),
                            margin_probe=functools.partial(plain_margin, target, ids))
    _LIVE.add(comparison)
    return comparison


def _open_lane(spec: RunSpec, name: str, method, models: ModelCache, preset: Preset, target, config: DecodeConfig,
               ids: list[int], special: set[int], budget: CallBudget, wait_for_fits: bool, new_fits: bool) -> Lane:
    """One lane of `start`: its models (loaded or fitted under the call's budget) and its decoder's generator."""
    lane_budget, lane_config, draft, assistant, auto = None, config, None, None, False
    if method.oracle:
        lane_config = methods.oracle_config(config) if spec.auto_budget else config
        lane_budget, auto = lane_config.tree_budget, spec.auto_budget
    elif method.assistant:
        assistant = models.assistant(preset, name, target, spec.quantization, spec.precision)
        budget.check(f"loading the assistant of {preset.name}")
    elif methods.uses_draft(name):
        draft = models.draft(preset, name, target, spec.quantization, spec.precision)
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
    return Lane(name, method.label, method.trained, special_ids=special, budget=lane_budget,
                depth_stop=lane_config.depth_stop, budget_auto=auto and lane_budget is not None, source=source,
                detok=Detokenizer(target.tokenizer), token_text=TokenTexts(target.tokenizer))


def fit_offered(models: ModelCache, target, draft, config: DecodeConfig, wait_for_fits: bool = True,
                new_fits: bool = True) -> bool:
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


def fit_budgets(spec: RunSpec, models: ModelCache = MODELS, wait_for_fits: bool = True, new_fits: bool = True,
                cancel: threading.Event | None = None) -> Iterator[str]:
    """Before `start` with auto_budget: load the models and fit each draft lane's budget, yielding a status line
    before each step that may take a while (the first calibration of a draft on a CPU takes tens of seconds; later
    ones read the cache). With `wait_for_fits=False`, a fit another thread has under way is not waited for, and with
    `new_fits=False` no fit is started: the status says the lane starts on the default budget. `cancel` (the call's
    budget) stops a fit within one round with CallStopped."""
    if not spec.auto_budget:
        return
    spec.check()
    budget = as_budget(cancel)
    preset = get_preset(spec.preset)
    config = spec.config()
    target = models.target(preset, spec.quantization, spec.precision)
    for method in spec.methods:
        if not methods.uses_draft(method):
            continue
        budget.check(f"loading the draft {method!r}")
        draft = models.draft(preset, method, target, spec.quantization, spec.precision)
        label = methods.label_of(method, preset)
        if known_budget_choice(target, draft, config) is not None:
            continue
        if not new_fits:
            yield (f"{label} starts on the default tree budget ({config.tree_budget}): this server fits tree budgets "
                   f"only at start-up, and none is cached for depth {config.depth} and top-k {config.top_k}.")
        elif not wait_for_fits and models.fitting_elsewhere(target, draft, config):
            yield (f"{label} starts on the default tree budget ({config.tree_budget}) while the app fits tree budgets "
                   f"to this machine in the background; later runs use the fit.")
        else:
            yield f"Fitting the tree budget of {label} to this machine (once per draft and setting, then cached)…"
            try:
                models.budget(target, draft, config, cancel=budget)
            except CallStopped:
                raise budget.stopped(f"fitting the tree budget of {label}") from None


def prefit_budgets(spec: RunSpec, models: ModelCache = MODELS) -> None:
    """Fit every draft lane's auto budget now, one after another (the app does it at start-up, in the background).
    All of them count as under way from the start, so a Run that comes meanwhile starts on the default budgets
    (`wait_for_fits=False`) instead of waiting for calibrations it did not ask for (the app also sets
    `models.startup_fit` from before it loads anything until this returns)."""
    preset, config = get_preset(spec.preset), spec.config()
    target = models.target(preset, spec.quantization, spec.precision)
    drafts = [models.draft(preset, m, target, spec.quantization, spec.precision)
              for m in spec.methods if methods.uses_draft(m)]
    models.fit_budgets_in_turn(target, drafts, config)


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
