"""Incremental detokenization: the text that new tokens add, in context, for the decoders and the app's lanes."""

from __future__ import annotations

from collections.abc import Iterable


class Detokenizer:
    """Turns a growing list of token ids into text deltas.

    Each push decodes a short window of recent tokens (as streaming servers do), so a long answer costs O(round), not
    O(answer), per push; text is held back while it ends inside a multi-byte character or a sentencepiece space is
    still undecided. `flush` decodes everything once and returns whatever is still held back."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""
        self._prefix = 0  # window start: tokens before it are already text
        self._read = 0  # tokens up to here are already in self.text

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True) if self.tokenizer is not None else ""

    def push(self, tokens: Iterable[int], final: bool = False) -> str:
        """Append tokens and return the text they complete ("" while it is held back); `final` also flushes."""
        self.ids.extend(tokens)
        if final:
            return self.flush()
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd") or not after.startswith(before):
            return ""
        delta = after[len(before) :]
        self.text += delta
        self._prefix, self._read = self._read, len(self.ids)
        return delta

    def flush(self) -> str:
        """Any text still held back: the whole sequence decoded once (a decode's last round, or a cancelled one)."""
        full = self._decode(self.ids)
        delta = full[len(self.text) :] if full.startswith(self.text) else ""
        self.text = full if full.startswith(self.text) else self.text + delta
        self._prefix = self._read = len(self.ids)
        return delta


class TokenTexts:
    """The stand-alone text of a token id (tree labels, special tokens by name), cached."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def __call__(self, token: int) -> str:
        if token not in self.cache:
            self.cache[token] = self.tokenizer.decode([token], skip_special_tokens=False)
        return self.cache[token]
