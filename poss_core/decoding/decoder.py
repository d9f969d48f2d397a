"""Decoders: speculative (target + draft + config) and plain, both generators of `RoundEvent`s and a summary."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import torch

from ..base.errors import PromptError
from ..models.draft import DraftModel, DraftState, check_draft_fits
from ..models.target import TargetModel, causal_allowed, keep_cache_slots
from ..rounds import metrics
from ..rounds.events import DecodeSummary, DraftNode, FeatureDeviation, RoundEvent, TreeDeviation
from .config import DecodeConfig
from .continuation import every_position_deviation
from .detokenizer import Detokenizer
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
        logits = self.target.logits(hidden)
        if self.config.greedy:
            return logits
        return target_distribution(logits, self.config.temperature, self.config.top_p)

    @torch.inference_mode()
    def generate(
        self, input_ids: Sequence[int], cancel: threading.Event | None = None
    ) -> Iterator[RoundEvent | DecodeSummary]:
        cfg = self.config
        ids = self._check_prompt(input_ids)
        # Seconds of this decode that are not decoding work (the benchmark takes them off its wall time).
        self.untimed_s = 0.0
        gen = self._generator()
        stream = _Stream(self.target.tokenizer, self.target.eos_ids, cfg.max_new_tokens)
        cache = self.target.new_cache()
        state = self._new_state(ids)
        events: list[RoundEvent] = []

        t0 = time.perf_counter()
        out, root = self._prefill(ids, cache, gen, cancel)
        if out is None:  # stopped while reading the prompt
            yield self._finish(events, stream, "cancelled")
            return
        # Row j of the draft pairs token x[j+1] with the target feature at j.
        state.add_rows(torch.cat([ids[1:], torch.tensor([root])]), out.hidden)
        events.append(self._prefill_event(root, stream, _ms(t0)))
        # Every committed token and the target's feature of each one it has read: the continuation deviation's input.
        committed, features, roots = [ids, torch.tensor([root])], [out.hidden], [0]
        yield events[-1]
        n = len(ids) + 1  # committed tokens; the target's cache holds n - 1 (the root is not yet read)
        while stream.stop_reason is None:
            if self._stopped_before_round(stream, cancel, n):
                break
            t_round = time.perf_counter()
            # Committed tokens never exceed the context window: accepted nodes plus the bonus must fit.
            depth = min(cfg.depth, self.target.max_context - n - 1)
            tree = self._draft_tree(state, depth) if depth > 0 else DraftTree.empty(self.target.hidden_size)
            draft_ms = _ms(t_round)

            t0 = time.perf_counter()
            slots = torch.cat([torch.tensor([root]), tree.tokens])
            allowed = torch.ones(tree.size + 1, n + tree.size, dtype=torch.bool)
            allowed[:, n - 1 :] = tree.ancestors()
            out = self.target.forward(
                slots, n - 1 + torch.cat([torch.zeros(1, dtype=torch.long), tree.depths]), allowed, cache, logits="none"
            )
            rows = SlotRows(self._target_rows, out.hidden, tree.parents, every_slot=cfg.head_rows == "all")
            verify_ms = _ms(t0)

            if cfg.greedy:
                path, bonus = verify_greedy(tree, rows)
                target_probs = (rows.at_nodes(tree.tokens) - rows.log_norms()).exp()
            else:
                path, bonus = verify_sampling(tree, rows, gen)
                target_probs = rows.at_nodes(tree.tokens)
            bonus_prob = _bonus_prob(rows, path, bonus, cfg.greedy)
            verify_ms += rows.lazy_ms  # a leaf's LM-head row read during acceptance is the target's work too

            keep = torch.tensor([0] + [a + 1 for a in path])
            keep_cache_slots(cache, n - 1, keep)
            path_tokens = tree.tokens[path].tolist() if path else []
            kept_tokens, kept_features = torch.tensor(path_tokens + [bonus]), out.hidden[keep.to(out.hidden.device)]
            state.add_rows(kept_tokens, kept_features)
            roots.append(n - 1)
            committed.append(kept_tokens)
            features.append(kept_features)
            n += len(path) + 1
            root = bonus
            kept, delta = stream.push(path_tokens + [bonus])
            path, past_end = cut_at_end(path, len(kept))  # what the answer's end leaves of the path (the last round)
            deviation = _feature_deviation(tree, path, out.hidden)
            events.append(
                RoundEvent(
                    round=len(events),
                    nodes=_nodes(tree),
                    accepted=list(path),
                    bonus=bonus,
                    target_probs=[float(p) for p in target_probs.tolist()],
                    feature_deviation=deviation,
                    draft_ms=draft_ms,
                    verify_ms=verify_ms,
                    new_tokens=len(stream.ids),
                    tokens=kept,
                    text=delta,
                    wall_ms=_ms(t_round),
                    draft_ms_by_depth=_draft_ms_by_depth(tree, draft_ms),
                    bonus_prob=bonus_prob,
                    past_end=past_end,
                )
            )
            if tree.root_feature is not None:  # a measurement, not decoding work: outside the round's time, untimed
                t0 = time.perf_counter()
                events[-1].tree_deviation = _tree_deviation(tree, path, out.hidden)
                self.untimed_s += time.perf_counter() - t0
            yield events[-1]
        if stream.stop_reason != "cancelled":  # untimed, after the last round: a stopped decode ends at once
            self._add_continuation(events, roots, torch.cat(committed), torch.cat(features))
        yield self._finish(events, stream, stream.stop_reason)

    def _add_continuation(
        self, events: list[RoundEvent], roots: list[int], tokens: torch.Tensor, features: torch.Tensor
    ) -> None:
        """Each drafting round's deviation along the target's own continuation, from its root and from every
        position it covered (continuation.py), in one batched unroll."""
        ends = [*roots[1:], len(tokens)]  # a round covers its root up to the next round's root
        drafted = [(e, (p, end)) for e, p, end in zip(events, roots, ends) if not e.prefill and e.nodes]
        if not drafted or self.draft is None:  # the oracle drafts without a draft model, so without features
            return
        t0 = time.perf_counter()
        from_root, every = every_position_deviation(
            self.draft, tokens, features, [span for _, span in drafted], self.config.depth
        )
        for (event, _), root_dev, every_dev in zip(drafted, from_root, every):
            event.continuation_deviation = root_dev
            event.every_position_deviation = every_dev
        self.untimed_s += time.perf_counter() - t0


def cut_at_end(path: list[int], kept: int) -> tuple[list[int], int]:
    """A round's accepted path as the answer keeps it, and how many of its tokens (the bonus last) fell past the
    answer's end: `kept` tokens of path + bonus went into the answer (the end-of-turn token or the token limit cut
    the rest)."""
    past_end = max(0, len(path) + 1 - kept)
    return (path[:kept] if past_end else path), past_end


def _bonus_prob(rows: SlotRows, path: list[int], bonus: int, greedy: bool) -> float:
    """The target's probability of its own token at the slot where acceptance stopped (a row verification has
    already read): softmax of the logits (greedy), or the sampling distribution itself."""
    row = rows[path[-1] + 1 if path else 0]
    if greedy:
        row = row.float()
        return float(torch.exp(row[bonus] - torch.logsumexp(row, dim=-1)))
    return float(row[bonus])


def _draft_ms_by_depth(tree: DraftTree, draft_ms: float) -> list[float]:
    """What drafting would have cost stopped after each depth: the build's mark at that depth plus what came after
    the last depth (pruning, the decoder's own bookkeeping), which every tree pays whatever its depth."""
    if not tree.depth_ms:
        return []
    tail = max(0.0, draft_ms - tree.depth_ms[-1])
    return [m + tail for m in tree.depth_ms]


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


def _distances(pred: torch.Tensor, true: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """L2 distance and cosine distance (1 - cos) between rows of predicted and true features."""
    pred, true = pred.float(), true.float().to(pred.device)
    return (pred - true).norm(dim=-1), 1.0 - torch.nn.functional.cosine_similarity(pred, true, dim=-1)


def _tree_deviation(tree: DraftTree, path: list[int], hidden: torch.Tensor) -> list[TreeDeviation]:
    """Every tree slot whose predicted feature drafted a position: the root (position 1) and each node with a
    feature (position depth + 1), against the target's true feature at that slot, averaged by position on the
    accepted path and off it. The path's last accepted slot is the feature behind the rejection that ended it."""
    if tree.root_feature is None:  # a draft without features (the oracle)
        return []
    nodes = torch.nonzero(tree.has_feature).flatten()
    pred = torch.cat([tree.root_feature[None], tree.node_features[nodes]])
    slots = torch.cat([torch.zeros(1, dtype=torch.long), nodes.cpu() + 1])
    l2, cos = _distances(pred, hidden[slots.to(hidden.device)])
    k = torch.cat([torch.ones(1, dtype=torch.long), tree.depths[nodes].cpu() + 1])
    on = torch.zeros(len(slots), dtype=torch.bool)
    on[0] = True
    on[1:] = torch.isin(nodes.cpu(), torch.tensor(path, dtype=torch.long))
    out = []
    for pos in sorted(set(k.tolist())):
        for on_path in (True, False):
            sel = (k == pos) & (on == on_path)
            if bool(sel.any()):
                out.append(TreeDeviation(pos, on_path, float(l2[sel].mean()), float(cos[sel].mean()), int(sel.sum())))
    return out


def _feature_deviation(tree: DraftTree, path: list[int], hidden: torch.Tensor) -> list[FeatureDeviation]:
    """For accepted position k: the draft's predicted feature at the slot before it vs the target's true feature."""
    if not path or tree.root_feature is None:  # a draft without features (the oracle) has no deviation
        return []
    predicted = [tree.root_feature] + [tree.node_features[a] for a in path[:-1]]
    true_slots = [0] + [a + 1 for a in path[:-1]]
    l2, cos = _distances(torch.stack(predicted), hidden[torch.tensor(true_slots, device=hidden.device)])
    return [FeatureDeviation(float(a), float(b)) for a, b in zip(l2.tolist(), cos.tolist())]
