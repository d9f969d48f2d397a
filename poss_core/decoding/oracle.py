"""The oracle: speculative decoding whose "draft" is the target's own continuation, known from a plain run of the same
prompt. Every round proposes the next `depth` tokens of it, so every round accepts up to the depth: its speed is the
most any draft can reach with this engine, on this machine, at these settings (the ceiling the benchmark divides by).

The continuation is computed once per prompt (`prepare`, untimed: the benchmark calls it before its clock starts, and
`generate` calls it before its first round) and reused. Where the decode leaves it (a rounding near-tie in low
precision), a plain run from there continues it; that time is taken out of the rounds' timings and reported as
`untimed_s` (the benchmark subtracts it). Drafting costs no model call; the tree is the chain of the
next tokens, padded with filler siblings (never accepted) up to the tree budget when `pad_to_budget` is set, so the
verify pass has the same size as a real draft's tree of that budget."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from ..models.target import TargetModel
from ..rounds.events import RoundEvent
from .config import DecodeConfig
from .decoder import PlainDecoder, SpeculativeDecoder
from .tree import DraftTree


class _OracleState:
    """What the oracle keeps between rounds: the tokens committed after the prompt (the decoder's `add_rows` feeds
    every round's accepted tokens and bonus, the first call the prompt's rows and the first token)."""

    def __init__(self, prompt_len: int) -> None:
        self.skip = prompt_len - 1  # the first add_rows carries ids[1:] before the first new token
        self.emitted: list[int] = []

    def add_rows(self, tokens: torch.Tensor, features: torch.Tensor) -> None:
        new = tokens.tolist()
        drop = min(self.skip, len(new))
        self.skip -= drop
        self.emitted.extend(new[drop:])


class OracleDecoder(SpeculativeDecoder):
    """Speculative decoding with a perfect draft: the target's own continuation of the prompt."""

    method = "oracle"

    def __init__(self, target: TargetModel, config: DecodeConfig, pad_to_budget: bool = True) -> None:
        self.target = target
        # Acceptance always runs to the chain's last node, a leaf: one LM-head call over every slot is cheaper than
        # the rows with children plus a second call for that leaf.
        self.config = config.changed(head_rows="all")
        self.draft = None
        self._stats_depth = config.depth
        self.pad_to_budget = pad_to_budget
        self._continuations: dict[tuple[int, ...], list[int]] = {}  # shared by copies (the benchmark copies lanes)
        self._cancel = None  # the running decode's cancel flag: a re-derived continuation stops with it

    def prepare(self, input_ids: Sequence[int], cancel=None) -> list[int]:
        """The target's own continuation of `input_ids` (plain decoding with this config), computed once. `cancel`
        (an Event, e.g. a call's cap) stops the reference decode within one token; a cut-short continuation is
        returned but not kept."""
        key = tuple(int(t) for t in input_ids)
        known = self._continuations.get(key)
        want = self.config.max_new_tokens
        if known is not None and (len(known) >= want or (known and known[-1] in self.target.eos_ids)):
            return known
        tokens = self._plain_continuation(list(key), want, cancel)
        if not (cancel is not None and cancel.is_set()):
            self._continuations[key] = tokens
        return tokens

    def _plain_continuation(self, ids: list[int], max_new_tokens: int, cancel=None) -> list[int]:
        """Plain decoding's tokens after `ids`: the oracle's reference, stopped early when `cancel` is set."""
        plain = PlainDecoder(self.target, self.config.changed(max_new_tokens=max_new_tokens))
        return list(list(plain.generate(ids, cancel=cancel))[-1].token_ids)

    def generate(self, input_ids: Sequence[int], cancel=None):
        self._key = tuple(int(t) for t in input_ids)
        self._cancel = cancel
        self._current = self.prepare(input_ids, cancel)
        self._round_untimed = 0.0
        return self._rounds(super().generate(input_ids, cancel))

    def _rounds(self, events):
        """The decoder's events, less the time spent re-deriving the continuation in each round."""
        for item in events:
            if isinstance(item, RoundEvent) and self._round_untimed:
                ms = self._round_untimed * 1000.0
                item.wall_ms = max(0.0, item.wall_ms - ms)
                item.draft_ms = max(0.0, item.draft_ms - ms)
                item.draft_ms_by_depth = []
                self._round_untimed = 0.0
            yield item

    def _realign(self, emitted: list[int]) -> list[int]:
        """The continuation after `emitted`, when the decode has left the known one: in low precision a batched
        verify pass and a one-token plain step can round a near-tie differently (what the benchmark's identity check
        calls a near-tie). A plain run from there gives the rest; it is timed apart, so the oracle's rounds stay
        a perfect draft's, and kept, so the next run of the same prompt does not need it."""
        t0 = time.perf_counter()
        left = self.config.max_new_tokens - len(emitted)
        rest: list[int] = []
        if left > 0 and not (emitted and emitted[-1] in self.target.eos_ids):
            rest = self._plain_continuation(list(self._key) + emitted, left, self._cancel)
        cont = list(emitted) + rest
        self._continuations[self._key] = cont
        spent = time.perf_counter() - t0
        self.untimed_s += spent
        self._round_untimed += spent
        return cont

    def _new_state(self, ids: torch.Tensor) -> _OracleState:
        return _OracleState(int(ids.numel()))

    def _draft_tree(self, state: _OracleState, depth: int) -> DraftTree:
        emitted, cont = state.emitted, self._current
        n = len(emitted)
        if cont[:n] != emitted:
            cont = self._current = self._realign(emitted)
        chain = cont[n : n + depth]
        budget = self.config.tree_budget - 1 if self.pad_to_budget else len(chain)
        chain = chain[:budget]
        return oracle_tree(chain, max(budget, len(chain)), depth, self.target.vocab_size, self.target.hidden_size)


def oracle_tree(chain: list[int], size: int, depth: int, vocab_size: int, hidden_size: int) -> DraftTree:
    """The chain as nodes 0..m-1 (each the child of the one before, draft probability 1), then `size - m` filler
    leaves: siblings of the chain's nodes (children of the root and of chain nodes, shallowest first), each a token
    other than the chain's at that depth, scored below the chain so verification tries the chain first."""
    m = len(chain)
    tokens, parents, depths, scores = list(chain), list(range(-1, m - 1)), list(range(1, m + 1)), [0.0] * m
    fill, j = size - m, 1
    slots = min(depth, m + 1)  # filler may hang below the root and below chain nodes, staying within the depth
    while fill > 0:
        for level in range(slots):
            if fill == 0:
                break
            true = chain[level] if level < m else -1
            tok = (true + j) % vocab_size if true >= 0 else (j - 1) % vocab_size
            tokens.append(tok)
            parents.append(level - 1)
            depths.append(level + 1)
            scores.append(-float(j))
            fill -= 1
        j += 1
    k = len(tokens)
    as_long = lambda v: torch.tensor(v, dtype=torch.long)  # noqa: E731
    score = torch.tensor(scores, dtype=torch.float32)
    return DraftTree(
        as_long(tokens).reshape(k),
        as_long(parents).reshape(k),
        as_long(depths).reshape(k),
        score,
        score.exp(),
        torch.zeros(k, dtype=torch.long),
        None,
        torch.zeros(k, hidden_size),
        torch.zeros(k, dtype=torch.bool),
    )
