"""The targets, drafts, assistants and tree-budget fits every comparison shares: loaded once per process, one load
per model at a time, at most a few targets kept (their drafts evicted with them), and within a memory total: past it
the least recently used targets go, all but the one in use, and a target that alone needs more is refused."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any

from ..autobudget import cached_budget_choice, known_budget_choice
from ..base.errors import CallStopped, ModelLoadError, PossError
from ..decoding.config import DecodeConfig
from ..models import loading
from ..models.hardware import cuda_available
from ..models.presets import Preset
from ..models.resident import model_bytes, release_memory
from . import methods

MB = 2**20


class ModelCache:
    """Targets and drafts loaded once and shared by every session; one lock per model so sessions loading
    different models do not wait on each other. Keeps at most `max_targets` targets (and their drafts), and, with a
    `memory_bytes`, their weights in main memory within it (GPU memory is the device's own to bound)."""

    def __init__(self, max_targets: int = 2, memory_bytes: int | None = None) -> None:
        self.max_targets = max_targets
        self.memory_bytes = memory_bytes  # the memory total (the app's --session-memory-mb); None: no total
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}
        self._targets: OrderedDict[tuple, Any] = OrderedDict()
        self._drafts: dict[tuple, Any] = {}
        self._sizes: dict[tuple, int] = {}  # target key -> main memory it held with its drafts when last measured
        self._fitting: set[tuple] = set()  # budget fits under way (e.g. the app's start-up fit)
        self.startup_fit = threading.Event()  # set while the app's start-up loads and fits (see prefit_budgets)
        self.dtype = None  # the precision "auto" stands for (None: the device's default)

    def _target_key(self, preset: Preset, quantization: str, precision: str) -> tuple:
        dtype = self.dtype if precision in (None, "", "auto") else loading.parse_dtype(precision)
        # Keyed by what it loads as: `auto` and the precision it stands for are one target, not two copies, and so
        # are quantization `auto` and `none` without a GPU (auto quantizes only to fit a GPU).
        if quantization in (None, "", "auto") and not cuda_available():
            quantization = "none"
        return (preset.target, quantization, loading.load_dtype(preset.target, dtype))

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
            self.fit_total(room=self._expected_bytes(key))  # room first: never two copies at once past the total
            try:
                target = loading.load_preset_target(preset.target, quantization=quantization, dtype=key[2])
            except PossError:
                raise
            except Exception as err:  # out of memory, missing packages, broken files: one readable line
                raise ModelLoadError(
                    f"could not load {preset.name!r}: {type(err).__name__}: "
                    f"{str(err).splitlines()[0] if str(err) else ''}"
                ) from err
            self._refuse_past_total(preset, key, target)
            with self._lock:
                self._targets[key] = target
                while len(self._targets) > self.max_targets:
                    self._evict(next(iter(self._targets)))
            self.fit_total(keep=key)
            return target

    def _evict(self, key: tuple) -> None:
        """Let go of a target and what was loaded beside it (under the lock); a run still using them keeps them
        until it ends."""
        self._targets.pop(key, None)
        for dk in [k for k in self._drafts if k[:3] == key]:
            del self._drafts[dk]

    def _main_memory_bytes(self, key: tuple) -> int:
        """What a target and the models beside it hold in main memory (0 for a target on a GPU)."""
        with self._lock:
            models = [self._targets.get(key), *(m for k, m in self._drafts.items() if k[:3] == key)]
        if any(getattr(getattr(m, "device", None), "type", "cpu") != "cpu" for m in models if m is not None):
            return 0
        return model_bytes(*(m for m in models if m is not None))

    def resident_bytes(self) -> int:
        """What every loaded target and the models beside them hold in main memory."""
        with self._lock:
            keys = list(self._targets)
        return sum(self._main_memory_bytes(k) for k in keys)

    def _expected_bytes(self, key: tuple) -> int:
        """What a target about to load will hold with its drafts: as much as when it was last loaded, else as much
        as the largest one loaded now (another precision or quantization of the same model, most often)."""
        with self._lock:
            known, keys = self._sizes.get(key), list(self._targets)
        return known if known is not None else max((self._main_memory_bytes(k) for k in keys), default=0)

    def fit_total(self, keep: tuple | None = None, room: int = 0) -> int:
        """Past `memory_bytes` (with `room` more bytes to come), let go of the least recently used targets (and their
        drafts) but `keep`, the one in use; returns how many went."""
        if not self.memory_bytes:
            return 0
        if keep is not None:
            with self._lock:
                in_cache = keep in self._targets
            if in_cache:
                size = self._main_memory_bytes(keep)
                with self._lock:
                    self._sizes[keep] = size
        gone = 0
        while self.resident_bytes() + room > self.memory_bytes:
            with self._lock:
                old = next((k for k in self._targets if k != keep), None)
                if old is None:
                    break
                self._evict(old)
            gone += 1
            print(
                f"[poss] models: let go of {old[0]} ({old[2]}, quantization {old[1]}) to stay within the memory total "
                f"of {self.memory_bytes / MB:.0f} MB",
                file=sys.stderr,
                flush=True,
            )
        if gone:
            release_memory()
        return gone

    def _refuse_past_total(self, preset: Preset, key: tuple, target) -> None:
        """A target that alone needs more main memory than the total is refused (and let go at once)."""
        if not self.memory_bytes or getattr(getattr(target, "device", None), "type", "cpu") != "cpu":
            return
        need = model_bytes(target)
        if need <= self.memory_bytes:
            return
        del target
        release_memory()
        raise ModelLoadError(
            f"{preset.name!r} in {str(key[2]).replace('torch.', '')} (quantization {key[1]}) needs "
            f"{need / MB:.0f} MB, more than this server's memory total of {self.memory_bytes / MB:.0f} MB: pick a "
            f"lower precision or 8-bit, or a smaller preset."
        )

    def draft(
        self, preset: Preset, method: methods.Method, target, quantization: str = "auto", precision: str = "auto"
    ):
        """A draft method's draft for this target, loaded once (keyed by its source, the preset's depth and its
        positions per specialist)."""
        ref = method.draft
        key = (
            *self._target_key(preset, quantization, precision),
            ref.source,
            preset.depth,
            ref.positions_per_specialist,
        )
        return self._beside_target(
            key, lambda: methods.load_draft(method, target, preset.depth), f"draft {method.name!r} of {preset.name!r}"
        )

    def assistant(
        self, preset: Preset, method: methods.Method, target, quantization: str = "auto", precision: str = "auto"
    ):
        """The assisted method's smaller model, loaded once per target and kept (and evicted) with its drafts."""
        key = (*self._target_key(preset, quantization, precision), "assistant", method.assistant)
        return self._beside_target(
            key,
            lambda: methods.load_assistant(method, target, quantization),
            f"the assistant {method.assistant!r} of {preset.name!r}",
        )

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
                raise ModelLoadError(
                    f"could not load {what}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                ) from err
            with self._lock:
                self._drafts[key] = model
            self.fit_total(keep=key[:3])
            return model

    def budget(self, target, draft, config: DecodeConfig, log=None, cancel: threading.Event | None = None):
        """The tree budget fitted to this machine for `draft` at the config's depth and top_k (calibrated once per
        machine and cached on disk; one calibration at a time per draft). With `cancel` (a call's cap), waiting
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
