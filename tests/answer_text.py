"""Whether an answer reads as a sensible English answer: mostly English words, and no phrase looping (a 3-word phrase
said 4 times or more is how a small model's loop shows)."""

from __future__ import annotations

import re
from collections import Counter

# The commonest English words: any English answer of a sentence or two is full of them, a loop in another language is
# not.
COMMON = set(
    """the of and to a in is it that for you are with as on be this by or an at from can your not have will but
    all one their they more use each which what when how if about so some these there we its into has more than
    other do time could our them may then also like each make only over such after most very just first well any
    because should through help way between need each where even both those while find day s get let are""".split()
)
WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


def english_share(text: str) -> float:
    """The share of the text's words that are common English words (an English answer: a third or more)."""
    found = words(text)
    return sum(w in COMMON for w in found) / len(found) if found else 0.0


def ascii_share(text: str) -> float:
    """The share of the text's letters that are ASCII (English: all, or all but a name's accent)."""
    letters = [c for c in text if c.isalpha()]
    return sum(c.isascii() for c in letters) / len(letters) if letters else 0.0


def looping_phrase(text: str, length: int = 3, times: int = 4) -> str | None:
    """A phrase of `length` words said `times` times or more, if any (the most repeated one)."""
    found = words(text)
    grams = Counter(tuple(found[i : i + length]) for i in range(len(found) - length + 1))
    if not grams:
        return None
    gram, count = grams.most_common(1)[0]
    return " ".join(gram) if count >= times else None


def sensible(text: str) -> str:
    """Why `text` is not a sensible English answer, or "" if it is one."""
    if len(words(text)) < 5:
        return f"too short: {text!r}"
    if ascii_share(text) < 0.98:
        return f"not English letters: {text[:80]!r}"
    if english_share(text) < 0.25:
        return f"not English words ({english_share(text):.0%} common words): {text[:80]!r}"
    loop = looping_phrase(text)
    if loop:
        return f"loops: {loop!r} said 4 times or more"
    return ""
