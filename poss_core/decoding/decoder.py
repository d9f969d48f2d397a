"""Decoders: speculative (target + draft + config) and plain, both generators of `RoundEvent`s and a summary.

A speculative round is three steps, each a method of `SpeculativeDecoder`, in the order `generate` runs them:
draft (`_draft`: the draft model builds a tree from the root), verify (`_verify`: one target forward over the tree,
then acceptance), commit (`_commit`: the target's cache, the draft's rows and the emitted tokens; `_round_event`:
the `RoundEvent`). What is measured beside them (feature deviations, drafting time by depth) is in measures.py.

Glossary:
    root         the last committed token, which the target has not read yet: slot 0 of a round's verify pass, and
                 the parent (-1) of the tree's first level. The prefill's pick is the first root.
    node         one drafted token of a round's tree (node i is slot i + 1 of the verify pass), with its parent,
                 depth, cumulative draft score and the specialist that drafted it (`DraftNode` in events).
    bonus        the target's own token where acceptance stopped: committed after the accepted path, so every round
                 emits at least one token, and the next round's root.
    round        one draft -> verify -> commit, one `RoundEvent`; round 0 is the prefill (the prompt read, the first
                 token picked, nothing drafted); a round of plain decoding drafts nothing and emits one token.
    lane         one method's decode in a comparison (runtime/compare.py); a decoder does not know it has one.
    turn         one user message and its answer in a conversation (the benchmark's multi-turn questions).
    accept length  `accept_len`: the nodes a round accepted, 0 to the depth; the round emits accept_len + 1 tokens
                 (fewer in a last round that the answer's end cut: `past_end`).
    τ            the mean accept length + 1 over the drafting rounds: tokens per target forward (rounds/metrics.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..base.errors import PromptError
from ..models.draft import DraftModel, DraftState, check_draft_fits
from ..models.target import TargetModel, causal_allowed, keep_cache_slots
from ..rounds import metrics
from ..rounds.events import DecodeSummary, DraftNode, RoundEvent
from .config import DecodeConfig
from .detokenizer import Detokenizer
from .measures import CommittedTrace, draft_ms_by_depth, feature_deviation, tree_deviation
from .tree import DraftTree, build_tree
from .tree import ms_since as _ms
from .verify import SlotRows, target_distribution, verify_greedy, verify_sampling

Message = dict  # {"role": ..., "content": ...}


def encode_prompt(tokenizer, prompt: str | Sequence[Message], use_chat_template: bool = True) -> list[int]:
    """Token ids for a prompt: a string (one user turn) or a list of chat messages, through the chat template."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if not messages or not any(str(m.get("content", "")).strip() for m in messages):
        raise PromptError("the prompt is empty: type a question or instruction.")
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    text = "\n".join(str(m["content"]) for m in messages)
    return list(tokenizer(text)["input_ids"])


class _Stream:
    """Collects emitted tokens, applies the stop rules (EOS, the token budget) and turns tokens into text deltas."""

    def __init__(self, tokenizer, eos_ids: set[int], max_new_tokens: int) -> None:
        self.detok = Detokenizer(tokenizer)
        self.eos_ids = eos_ids
        self.max_new_tokens = max_new_tokens
        self.stop_reason: str | None = None

    @property
    def ids(self) -> list[int]:
        return self.detok.ids

    @property
    def text(self) -> str:
        return self.detok.text

    def push(self, tokens: list[int]) -> tuple[list[int], str]:
        """Append a round's tokens (cut at EOS or the budget); return what was kept and its text."""
        kept: list[int] = []
        for t in tokens:
            if len(self.ids) + len(kept) >= self.max_new_tokens:
                self.stop_reason = "max_new_tokens"
                break
            kept.append(t)
            if t in self.eos_ids:
                self.stop_reason = "eos"
                break
        if self.stop_reason is None and len(self.ids) + len(kept) >= self.max_new_tokens:
            self.stop_reason = "max_new_tokens"
        return kept, self.detok.push(kept, final=self.stop_reason is not None)

    def finish(self) -> str:
        """Any text still held back (a cancelled or context-limited decode ends without a stop round)."""
        return self.detok.flush()


class _BaseDecoder:
    """What both decoders share: prompt checks, the prefill round, stopping, and the closing summary."""

    method = "base"
    _stats_depth: int | None = 0  # plain decoding drafts nothing: its histogram has only accept_len 0

    def __init__(self, target: TargetModel, config: DecodeConfig) -> None:
        self.target = target
        self.config = config

    def _check_prompt(self, input_ids: Sequence[int]) -> torch.Tensor:
        if len(input_ids) == 0:
            raise PromptError("the prompt is empty: type a question or instruction.")
        limit = self.target.max_context
        if len(input_ids) >= limit:
            raise PromptError(
                f"the prompt has {len(input_ids)} tokens but the model's context window is {limit} "
                f"(room is needed for at least one new token): shorten it."
            )
        return torch.as_tensor(list(input_ids), dtype=torch.long)

    def _pick(self, logits: torch.Tensor, generator: torch.Generator) -> int:
        if self.config.greedy:
            return int(logits.argmax())
        probs = target_distribution(logits, self.config.temperature, self.config.top_p)
        return int(torch.multinomial(probs, 1, generator=generator))

    def _prefill(self, ids: torch.Tensor, cache, generator: torch.Generator, cancel=None):
        """Read the prompt (in chunks, `cancel` checked between them) and pick the first token; (None, None) when
        the call was stopped meanwhile."""
        out = self.target.prefill(ids, cache, cancel)
        return (None, None) if out is None else (out, self._pick(out.logits[-1], generator))

    def _generator(self) -> torch.Generator:
        return torch.Generator().manual_seed(self.config.seed)

    def _finish(self, events: list[RoundEvent], stream: _Stream, reason: str | None) -> DecodeSummary:
        stream.finish()
        return DecodeSummary(
            text=stream.text,
            token_ids=list(stream.ids),
            stop_reason=reason or "max_new_tokens",
            stats=metrics.summarize(events, depth=self._stats_depth),
        )

    def _stopped_before_round(self, stream: _Stream, cancel, n: int) -> bool:
        """Whether the next round must not run (a cancelled call, or `n` committed tokens filling the context
        window), its stop reason set on the stream if so."""
        if cancel is not None and cancel.is_set():
            stream.stop_reason = "cancelled"
        elif n >= self.target.max_context:
            stream.stop_reason = "context_limit"
        return stream.stop_reason is not None

    def _prefill_event(self, first: int, stream: _Stream, ms: float) -> RoundEvent:
        kept, delta = stream.push([first])
        return RoundEvent.target_only(0, first, ms, len(stream.ids), tokens=kept, text=delta, wall_ms=ms, prefill=True)


class PlainDecoder(_BaseDecoder):
    """The target alone, one token per forward: the baseline every lane is compared with."""

    method = "plain"

    @torch.inference_mode()
    def generate(
        self, input_ids: Sequence[int], cancel: threading.Event | None = None
    ) -> Iterator[RoundEvent | DecodeSummary]:
        ids = self._check_prompt(input_ids)
        gen = self._generator()
        stream = _Stream(self.target.tokenizer, self.target.eos_ids, self.config.max_new_tokens)
        cache = self.target.new_cache()
        events: list[RoundEvent] = []
        t0 = time.perf_counter()
        out, token = self._prefill(ids, cache, gen, cancel)
        if out is None:  # stopped while reading the prompt
            yield self._finish(events, stream, "cancelled")
            return
        ms = _ms(t0)
        events.append(self._prefill_event(token, stream, ms))
        yield events[-1]
        n = len(ids) + 1
        while stream.stop_reason is None:
            if self._stopped_before_round(stream, cancel, n):
                break
            t0 = time.perf_counter()
            out = self.target.forward(
                torch.tensor([token]), torch.tensor([n - 1]), causal_allowed(1, n - 1), cache, logits="last"
            )
            verify_ms = _ms(t0)
            token = self._pick(out.logits[-1], gen)
            kept, delta = stream.push([token])
            n += 1
            events.append(
                RoundEvent.target_only(
                    len(events), token, verify_ms, len(stream.ids), tokens=kept, text=delta, wall_ms=_ms(t0)
                )
            )
            yield events[-1]
        yield self._finish(events, stream, stream.stop_reason)


@dataclass
class _Decode:
    """Where one speculative decode stands between rounds."""

    cache: Any  # the target's KV cache: the n - 1 committed tokens before the root
    draft_state: Any  # what the draft keeps between rounds (a DraftState; the oracle's own)
    stream: _Stream  # the emitted tokens and the stop rules
    generator: torch.Generator  # the random stream of sampling (the prefill's pick and verification)
    root: int = -1  # the last committed token, not yet read by the target (set by the prefill)
    n: int = 0  # committed tokens, the prompt and the root included
    events: list[RoundEvent] = field(default_factory=list)


@dataclass
class _Verdict:
    """What verification decided about one tree, and the target's work it read to decide."""

    path: list[int]  # the accepted nodes, the root's child first
    bonus: int  # the target's own token where acceptance stopped
    hidden: torch.Tensor  # [1 + n_nodes, H] the target's features at the root's slot and at each node's
    target_probs: torch.Tensor  # [n_nodes] the target's probability of each node's drafted token
    bonus_prob: float  # the target's probability of the bonus
    verify_ms: float  # the target's forward over the tree and every LM-head row read (acceptance's walk is not)


class SpeculativeDecoder(_BaseDecoder):
    """Draft an EAGLE-2 tree with the (POSS or EAGLE) draft, verify it with one target forward, keep what matches."""

    method = "spec"

    def __init__(self, target: TargetModel, draft: DraftModel, config: DecodeConfig) -> None:
        super().__init__(target, config)
        check_draft_fits(draft, target)
        self.draft = draft
        self._stats_depth = config.depth

    def _new_state(self, ids: torch.Tensor):
        """What the draft keeps between rounds; `generate` feeds it each round's committed tokens (`add_rows`)."""
        return DraftState(self.draft)

    def _draft_tree(self, state, depth: int) -> DraftTree:
        cfg = self.config
        return build_tree(self.draft, state, depth, cfg.top_k, cfg.tree_budget, cfg.depth_stop)

    def _target_rows(self, hidden: torch.Tensor) -> torch.Tensor:
        """What verification reads at a slot: the target's logits (greedy) or the distribution it samples from."""
        logits = self.target.logits(hidden)  # [slots, V]
        if self.config.greedy:
            return logits
        return target_distribution(logits, self.config.temperature, self.config.top_p)

    @torch.inference_mode()
    def generate(
        self, input_ids: Sequence[int], cancel: threading.Event | None = None
    ) -> Iterator[RoundEvent | DecodeSummary]:
        """Read the prompt, then run rounds of draft -> verify -> commit until a stop rule (EOS, the token budget,
        the context window, `cancel`) ends the decode; each round's event as it ends, the summary last."""
        ids = self._check_prompt(input_ids)  # [n_prompt]
        # Seconds of this decode that are not decoding work (the benchmark takes them off its wall time).
        self.untimed_s = 0.0
        stream = _Stream(self.target.tokenizer, self.target.eos_ids, self.config.max_new_tokens)
        decode = _Decode(self.target.new_cache(), self._new_state(ids), stream, self._generator(), n=len(ids) + 1)
        t0 = time.perf_counter()
        out, decode.root = self._prefill(ids, decode.cache, decode.generator, cancel)
        if out is None:  # stopped while reading the prompt
            yield self._finish(decode.events, stream, "cancelled")
            return
        # Row j of the draft pairs token x[j+1] with the target feature at j (out.hidden: [n_prompt, H]).
        decode.draft_state.add_rows(torch.cat([ids[1:], torch.tensor([decode.root])]), out.hidden)
        decode.events.append(self._prefill_event(decode.root, stream, _ms(t0)))
        trace = CommittedTrace(ids, decode.root, out.hidden)  # what the continuation's deviation reads at the end
        yield decode.events[-1]
        while stream.stop_reason is None and not self._stopped_before_round(stream, cancel, decode.n):
            t_round = time.perf_counter()
            tree = self._draft(decode)  # draft: [n_nodes] tokens hanging from the root
            draft_ms = _ms(t_round)
            verdict = self._verify(decode, tree)  # verify: the accepted path and the bonus
            kept, text = self._commit(decode, tree, verdict, trace)  # commit: cache, draft rows, emitted tokens
            event = self._round_event(decode, tree, verdict, kept, text, draft_ms, t_round)
            if tree.root_feature is not None:  # a measurement, not decoding work: outside the round's time
                event.tree_deviation = self._untimed(tree_deviation, tree, event.accepted, verdict.hidden)
            yield event
        drafted = trace.drafted_spans(decode.events)
        # After the last round (a stopped decode ends at once); the oracle drafts without a draft model's features.
        if stream.stop_reason != "cancelled" and drafted and self.draft is not None:
            self._untimed(trace.measure, drafted, self.draft, self.config.depth)
        yield self._finish(decode.events, stream, stream.stop_reason)

    def _draft(self, decode: _Decode) -> DraftTree:
        """Draft: the tree of candidate tokens hanging from the root, as deep as the context window leaves room."""
        # Committed tokens never exceed the context window: accepted nodes plus the bonus must fit.
        depth = min(self.config.depth, self.target.max_context - decode.n - 1)
        return self._draft_tree(decode.draft_state, depth) if depth > 0 else DraftTree.empty(self.target.hidden_size)

    def _verify(self, decode: _Decode, tree: DraftTree) -> _Verdict:
        """Verify: the target over the root and every node in one forward, then acceptance down the tree (greedy:
        while a node is the target's argmax; sampling: lossless rejection) to a path and the bonus after it."""
        t0 = time.perf_counter()
        hidden, rows = self._score_tree(decode, tree)
        verify_ms = _ms(t0)
        if self.config.greedy:
            path, bonus = verify_greedy(tree, rows)
            target_probs = (rows.at_nodes(tree.tokens) - rows.log_norms()).exp()
        else:
            path, bonus = verify_sampling(tree, rows, decode.generator)
            target_probs = rows.at_nodes(tree.tokens)
        bonus_prob = _bonus_prob(rows, path, bonus, self.config.greedy)
        # A leaf's LM-head row read during acceptance is the target's work too.
        return _Verdict(path, bonus, hidden, target_probs, bonus_prob, verify_ms + rows.lazy_ms)

    def _score_tree(self, decode: _Decode, tree: DraftTree) -> tuple[torch.Tensor, SlotRows]:
        """The target's forward over the tree: each slot at its position, seeing the committed context and its own
        ancestors. Returns the features [1 + n_nodes, H] and the rows verification reads (computed as read)."""
        slots = torch.cat([torch.tensor([decode.root]), tree.tokens])  # [1 + n_nodes]: the root, then node i at i + 1
        positions = decode.n - 1 + torch.cat([torch.zeros(1, dtype=torch.long), tree.depths])  # [1 + n_nodes]
        allowed = torch.ones(
            tree.size + 1, decode.n + tree.size, dtype=torch.bool
        )  # [1 + n_nodes, n - 1 + 1 + n_nodes]
        allowed[:, decode.n - 1 :] = tree.ancestors()
        out = self.target.forward(slots, positions, allowed, decode.cache, logits="none")
        rows = SlotRows(self._target_rows, out.hidden, tree.parents, every_slot=self.config.head_rows == "all")
        return out.hidden, rows

    def _commit(
        self, decode: _Decode, tree: DraftTree, verdict: _Verdict, trace: CommittedTrace
    ) -> tuple[list[int], str]:
        """Commit: keep the root's and the path's slots in the target's cache, give the draft their tokens and
        features, emit path + bonus (the stream cuts them at the answer's end); the bonus is the next root. Returns
        the tokens emitted and their text."""
        keep = torch.tensor([0] + [a + 1 for a in verdict.path])  # [1 + accept_len] slots: the root, then the path
        keep_cache_slots(decode.cache, decode.n - 1, keep)
        path_tokens = tree.tokens[verdict.path].tolist() if verdict.path else []
        tokens = torch.tensor(path_tokens + [verdict.bonus])  # [accept_len + 1]
        features = verdict.hidden[keep.to(verdict.hidden.device)]  # [1 + accept_len, H]
        decode.draft_state.add_rows(tokens, features)
        trace.add(decode.n - 1, tokens, features)
        decode.n += len(verdict.path) + 1
        decode.root = verdict.bonus
        return decode.stream.push(path_tokens + [verdict.bonus])

    def _round_event(
        self,
        decode: _Decode,
        tree: DraftTree,
        verdict: _Verdict,
        kept: list[int],
        text: str,
        draft_ms: float,
        t_round: float,
    ) -> RoundEvent:
        """The round as the views see it: the tree, the accepted path as the answer keeps it, the tokens emitted, the
        target's probabilities, the path's feature deviation and the round's times (its wall time from `t_round`,
        the perf_counter it began at, read once the rest is built: the round's time holds all of it)."""
        path, past_end = cut_at_end(verdict.path, len(kept))  # what the answer's end leaves of the path (last round)
        event = RoundEvent(
            round=len(decode.events),
            nodes=_nodes(tree),
            accepted=list(path),
            bonus=verdict.bonus,
            target_probs=[float(p) for p in verdict.target_probs.tolist()],
            feature_deviation=feature_deviation(tree, path, verdict.hidden),
            draft_ms=draft_ms,
            verify_ms=verdict.verify_ms,
            new_tokens=len(decode.stream.ids),
            tokens=kept,
            text=text,
            wall_ms=_ms(t_round),
            draft_ms_by_depth=draft_ms_by_depth(tree, draft_ms),
            bonus_prob=verdict.bonus_prob,
            past_end=past_end,
        )
        decode.events.append(event)
        return event

    def _untimed(self, measure: Callable[..., Any], *args: Any) -> Any:
        """Run a measurement that is not decoding work, its time added to `untimed_s`."""
        t0 = time.perf_counter()
        result = measure(*args)
        self.untimed_s += time.perf_counter() - t0
        return result


def cut_at_end(path: list[int], kept: int) -> tuple[list[int], int]:
    """A round's accepted path as the answer keeps it, and how many of its tokens (the bonus last) fell past the
    answer's end: `kept` tokens of path + bonus went into the answer (the end-of-turn token or the token limit cut
    the rest)."""
    past_end = max(0, len(path) + 1 - kept)
    return (path[:kept] if past_end else path), past_end


def _bonus_prob(rows: SlotRows, path: list[int], bonus: int, greedy: bool) -> float:
    """The target's probability of its own token at the slot where acceptance stopped (a row verification has
    already read): softmax of the logits (greedy), or the sampling distribution itself."""
    row = rows[path[-1] + 1 if path else 0]  # [V]
    if greedy:
        row = row.float()
        return float(torch.exp(row[bonus] - torch.logsumexp(row, dim=-1)))
    return float(row[bonus])


def _nodes(tree: DraftTree) -> list[DraftNode]:
    cols = zip(
        tree.tokens.tolist(),
        tree.parents.tolist(),
        tree.depths.tolist(),
        tree.scores.tolist(),
        tree.draft_probs.tolist(),
        tree.specialists.tolist(),
    )
    return [DraftNode(t, p, d, s, q, g) for t, p, d, s, q, g in cols]
