"""transformers' own `generate` as a decoder like the others (RoundEvents, then a DecodeSummary), in three modes:

- `plain`: greedy or sampled decoding, one token per target forward (the benchmark's `plain-hf` baseline);
- `pld`: prompt-lookup decoding (`prompt_lookup_num_tokens`): candidates are the tokens that followed the latest
  n-gram where it last occurred in the prompt or the text so far; no draft model at all;
- `assisted`: assisted generation (`assistant_model`): a smaller model with the target's tokenizer drafts greedily.

What a round is. transformers' streamer gets the prompt first, then one `put` per target forward: in `_sample` the
one new token, in `_assisted_decoding` `valid_tokens`, the candidates the target agreed with followed by the target's
own token, cut at EOS and at the length limit (transformers 5.24, generation/utils.py). So each put is a round: all
but its last token are the accepted candidates (a chain of nodes), the last is the bonus. What the candidate source
proposed beyond them (the rejected candidates), its probabilities and scores are not observable through the streamer:
the nodes carry NaN there and the events say `draft_observed=False`. Accept lengths are observed, so τ and the
acceptance by position (a round whose lookup found nothing counts as accepting 0) come out as for any method.

Draft positions per round. Both modes propose at most `config.depth` candidates per round (the depth EAGLE and POSS
draft to, so positions line up in every chart): `prompt_lookup_num_tokens=depth` (transformers' docs suggest ~10 for
input-grounded tasks; the same depth keeps the lanes comparable), and for `assisted` the assistant's
`num_assistant_tokens=depth` with transformers' other defaults (constant schedule, its confidence stop).

Streaming. `generate` runs in a worker thread and meets the consumer at each put (lockstep): the worker waits there
until the consumer asks for the next round, so a lane of a comparison computes only during its own turn and each
round's wall time is its own compute. A StoppingCriteria watching a flag ends `generate` at the next forward when the
consumer stops (Stop, closing the generator, EOS or the token budget; `_sample` checks it one forward after the
put, `_assisted_decoding` right after it), and the thread is joined before the decoder returns. Time: a round's wall
time runs from the worker's resumption to its put; drafting and verifying are not split by transformers, so
`draft_ms` is the time spent inside the assistant's forward passes (hooks on it; 0 for prompt lookup, whose
n-gram search is not timed apart) and `verify_ms` the rest. Sampling (temperature > 0) seeds
torch's global generator with `config.seed`, the only one generate uses.

No silent hang. The worker's exception (raised inside `generate`, a hook, a stopping criterion or the streamer) goes
through the queue and is raised in the consumer. The consumer never waits on the queue without a bound: after
`stall_s` seconds without a round (a `generate` stuck inside transformers or a device call, a streamer that is never
called) it raises `StallError` naming the method, and a worker that ended without saying so is an error too. The
worker's own wait for the consumer is not bounded: in the app a paused Step run waits on its user, and closing the
decoder's generator releases it. `progress`, when set, is called at every put, in the thread running `generate`:
the benchmark's stall watch hears each target forward even while `generate` runs in its own thread."""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from ..base.errors import ConfigError, StallError
from ..models.target import TargetModel
from ..rounds.events import DecodeSummary, DraftNode, RoundEvent
from .config import DecodeConfig
from .decoder import _BaseDecoder, _Stream, cut_at_end

MODES = ("plain", "pld", "assisted")
# Seconds without a new round before a decode counts as stalled. A round is one target forward: far under a second for
# the presets on their devices, and tens of seconds only for the first forward of a large model on a CPU.
STALL_SECONDS = 180.0
_POLL_S = 0.25  # how often the consumer looks at the worker while it waits for a round


class _Flags(StoppingCriteria):
    """Stops generate as soon as any of the flags is set (checked after every target forward)."""

    def __init__(self, *flags: threading.Event | None) -> None:
        self.flags = [f for f in flags if f is not None]

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        stop = any(f.is_set() for f in self.flags)
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


class _Lockstep:
    """A transformers streamer that hands each put to the consumer and waits until it asks for the next round. It
    stamps the round's wall time (from the worker's resumption to the put) and the assistant's forward time."""

    def __init__(
        self, stop: threading.Event, lockstep: bool = True, progress: Callable[[], None] | None = None
    ) -> None:
        self.items: queue.Queue = queue.Queue()
        self.progress = progress
        self.lockstep = lockstep  # False: generate runs in the consumer's own thread, which reads the rounds after
        self.go = threading.Semaphore(0)
        self.stop = stop
        self.draft_s = 0.0  # assistant forward time since the last put
        self.mark = time.perf_counter()
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate's first put is the prompt
            self._prompt_seen = True
            return
        wall_s, draft_s = time.perf_counter() - self.mark, self.draft_s
        if self.progress is not None:
            self.progress()
        self.items.put(("round", ([int(t) for t in value.reshape(-1).tolist()], wall_s, draft_s)))
        if self.lockstep and not self.stop.is_set():  # after a stop nobody waits: let generate reach its stop check
            self.go.acquire()
        self.draft_s = 0.0
        self.mark = time.perf_counter()

    def end(self) -> None:
        pass


class _ForwardTimer:
    """Forward hooks on the assistant that add its forward time to the streamer's `draft_s`, removed after use."""

    def __init__(self, model: torch.nn.Module, pipe: _Lockstep) -> None:
        self.model, self.pipe, self.t0 = model, pipe, 0.0
        self.sync = model.device.type == "cuda"  # GPU forwards return before they finish: time them finished

    def __enter__(self) -> "_ForwardTimer":
        self.handles = [self.model.register_forward_pre_hook(self._start), self.model.register_forward_hook(self._stop)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self.handles:
            h.remove()

    def _start(self, *args) -> None:
        if self.sync:
            torch.cuda.synchronize(self.model.device)
        self.t0 = time.perf_counter()

    def _stop(self, *args) -> None:
        if self.sync:
            torch.cuda.synchronize(self.model.device)
        self.pipe.draft_s += time.perf_counter() - self.t0


class HFGenerateDecoder(_BaseDecoder):
    """transformers' `generate` (plain, prompt lookup or assisted) yielding one RoundEvent per target forward."""

    def __init__(
        self,
        target: TargetModel,
        config: DecodeConfig,
        mode: str = "plain",
        assistant: TargetModel | None = None,
        in_caller_thread: bool = False,
        stall_s: float | None = STALL_SECONDS,
    ) -> None:
        super().__init__(target, config)
        if mode not in MODES:
            raise ConfigError(f"generate mode {mode!r} is unknown: use one of {', '.join(MODES)}.")
        if (mode == "assisted") != (assistant is not None):
            raise ConfigError("assisted generation needs an assistant model, and only it takes one.")
        if assistant is not None and assistant.vocab_size != target.vocab_size:
            raise ConfigError(
                f"assistant {assistant.name!r} has {assistant.vocab_size} token ids and the target "
                f"{target.vocab_size}: assisted generation needs a model with the target's tokenizer."
            )
        self.mode = mode
        self.assistant = assistant
        # True: `generate` runs transformers' generate to the end in the calling thread, then yields its rounds (the
        # benchmark: with OpenMP, a second thread's parallel regions run far slower while the calling thread's
        # team exists, as `python scripts/generate_thread_cost.py` measures); False: rounds stream from a worker.
        self.in_caller_thread = in_caller_thread
        self.stall_s = stall_s  # None or 0: wait for a round without a bound
        self.progress: Callable[[], None] | None = None  # called at every put (the benchmark's stall watch)
        self.method = {"plain": "plain-hf"}.get(mode, mode)
        self._stats_depth = 0 if mode == "plain" else config.depth

    def _generate_kwargs(self, prompt_len: int) -> dict[str, Any]:
        cfg, target = self.config, self.target
        eos = sorted(target.eos_ids) or None
        pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else (eos[0] if eos else 0)
        kwargs: dict[str, Any] = {"max_new_tokens": self._budget(prompt_len), "eos_token_id": eos, "pad_token_id": pad}
        if cfg.greedy:
            kwargs["do_sample"] = False
        else:
            kwargs.update(do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=0)
        if self.mode == "pld":
            kwargs["prompt_lookup_num_tokens"] = cfg.depth
        elif self.mode == "assisted":
            kwargs["assistant_model"] = self.assistant.model
        return kwargs

    def _budget(self, prompt_len: int) -> int:
        """New tokens generate may make: the token budget, within the context window."""
        return max(1, min(self.config.max_new_tokens, self.target.max_context - prompt_len))

    def _work(self, ids: torch.Tensor, pipe: _Lockstep, cancel: threading.Event | None) -> None:
        """The worker thread: one generate call; its end (or error) goes through the queue."""
        try:
            x = ids[None].to(self.target.device)
            kwargs = self._generate_kwargs(len(ids))
            if self.assistant is not None:
                gen_cfg = self.assistant.model.generation_config
                gen_cfg.num_assistant_tokens, gen_cfg.num_assistant_tokens_schedule = self.config.depth, "constant"
            torch.manual_seed(self.config.seed)
            timer = _ForwardTimer(self.assistant.model, pipe) if self.assistant is not None else None
            with torch.inference_mode():
                pipe.mark = time.perf_counter()
                if timer is not None:
                    with timer:
                        self._call(x, pipe, cancel, kwargs)
                else:
                    self._call(x, pipe, cancel, kwargs)
            pipe.items.put(("done", None))
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, which raises it
            pipe.items.put(("error", err))

    def _call(self, x: torch.Tensor, pipe: _Lockstep, cancel, kwargs: dict[str, Any]) -> None:
        self.target.model.generate(
            x,
            attention_mask=torch.ones_like(x),
            streamer=pipe,
            stopping_criteria=StoppingCriteriaList([_Flags(pipe.stop, cancel)]),
            **kwargs,
        )

    def _event(self, index: int, tokens: list[int], wall_s: float, draft_s: float, stream: _Stream) -> RoundEvent:
        accepted = tokens[:-1]
        kept, delta = stream.push(tokens)
        path, past_end = cut_at_end(list(range(len(accepted))), len(kept))
        wall_ms, draft_ms = wall_s * 1000.0, draft_s * 1000.0
        return RoundEvent(
            round=index,
            nodes=[DraftNode(t, i - 1, i + 1, math.nan, math.nan, 0) for i, t in enumerate(accepted)],
            accepted=path,
            bonus=tokens[-1],
            target_probs=[],
            feature_deviation=[],
            draft_ms=draft_ms,
            verify_ms=max(0.0, wall_ms - draft_ms),
            new_tokens=len(stream.ids),
            tokens=kept,
            text=delta,
            wall_ms=wall_ms,
            prefill=index == 0,
            draft_observed=self.mode == "plain",
            past_end=past_end,
        )

    def _next(self, pipe: _Lockstep, worker: threading.Thread | None) -> tuple[str, Any]:
        """The worker's next message, waiting at most `stall_s` seconds: a StallError past that (or a RuntimeError
        when the worker ended without a message), never a wait without end."""
        ended = RuntimeError(f"{self.method}: transformers' generate ended without a result or an error")
        if worker is None:  # generate already ran in this thread: every message is queued
            try:
                return pipe.items.get_nowait()
            except queue.Empty:
                raise ended from None
        bound = self.stall_s or None
        began = time.monotonic()
        while True:
            try:
                return pipe.items.get(timeout=_POLL_S)
            except queue.Empty:
                pass
            waited = time.monotonic() - began
            if not worker.is_alive() and pipe.items.empty():
                raise ended
            if bound is not None and waited >= bound:
                raise StallError(
                    f"{self.method} (transformers' generate, mode {self.mode}) made no progress for {waited:.3g} s: "
                    f"no target forward reached its streamer. Its device may be stuck or far too slow; raise the "
                    f"bound (the benchmark's --stall-seconds) only if one forward of this model really takes that long."
                )

    def _end_worker(self, pipe: _Lockstep, worker: threading.Thread | None, quiet: bool) -> None:
        """End generate at its next stop check and wait for its thread, at most `stall_s` seconds (a StallError
        past that unless `quiet`, when another error is already on its way)."""
        pipe.stop.set()
        pipe.go.release()
        if worker is None:
            return
        worker.join(timeout=self.stall_s or None)
        if worker.is_alive() and not quiet:
            raise StallError(
                f"{self.method} (transformers' generate) did not stop within {self.stall_s:g} s of being asked to: "
                f"its thread is left running."
            )

    def generate(
        self, input_ids: Sequence[int], cancel: threading.Event | None = None
    ) -> Iterator[RoundEvent | DecodeSummary]:
        ids = self._check_prompt(input_ids)
        stream = _Stream(self.target.tokenizer, self.target.eos_ids, self.config.max_new_tokens)
        pipe = _Lockstep(threading.Event(), lockstep=not self.in_caller_thread, progress=self.progress)
        events: list[RoundEvent] = []
        reason = None
        worker = None
        if self.in_caller_thread:
            self._work(ids, pipe, cancel)  # every round queued, then "done" (or the error)
        else:
            worker = threading.Thread(
                target=self._work, args=(ids, pipe, cancel), name=f"generate-{self.mode}", daemon=True
            )
            worker.start()
        try:
            while True:
                kind, payload = self._next(pipe, worker)
                if kind == "error":
                    raise payload
                if kind == "done":
                    break
                events.append(self._event(len(events), *payload, stream))
                yield events[-1]
                if stream.stop_reason is not None:
                    break
                if cancel is not None and cancel.is_set():
                    reason = "cancelled"
                    break
                pipe.go.release()
        except BaseException:  # an error or a closed generator: end generate at its next check, keep the first error
            self._end_worker(pipe, worker, quiet=True)
            raise
        self._end_worker(pipe, worker, quiet=False)
        if reason is None and stream.stop_reason is None and len(stream.ids) >= self._budget(len(ids)):
            reason = "context_limit"
        yield self._finish(events, stream, stream.stop_reason or reason)
