"""The app's outputs read as structure, not wording: the status line's kind and message, a lane header's title,
figures (`data-stat`), badges (`data-badge`) and state (`data-lane-state`), and each token span's source, draft
position, specialist and round (its classes and `data-round`). What the words say is checked in tests/wording.py."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any


@dataclass(frozen=True)
class Status:
    """The status line above the lanes: its kind ("info", "busy" or "error") and its message, unescaped."""

    kind: str
    text: str


_STATUS = re.compile(r'<div class="poss-status (\w+)">(.*)</div>\Z', re.S)
ICONS = {"error": "⚠ ", "busy": "⏳ "}  # token_html.status_html's icon per kind


def status(frame: Any) -> Status:
    """The status line of a frame: a handler's (outputs keyed by name), an API client's (the outputs in order, the
    status first), or the status HTML itself."""
    if isinstance(frame, (list, tuple)):
        frame = frame[0]
    if isinstance(frame, dict):
        frame = frame["status"]
    m = _STATUS.match(frame)
    assert m, f"not a status line: {frame!r}"
    kind, text = m.group(1), html.unescape(m.group(2))
    return Status(kind, text.removeprefix(ICONS.get(kind, "")))


def stats(head: str) -> dict[str, str]:
    """A lane header's figures by key (token_html.STAT_LABELS), as shown: {"tokens": "8", "tau": "2.33", ...}."""
    return {k: html.unescape(v) for k, v in re.findall(r'<span data-stat="(\w+)"><b>(.*?)</b>', head)}


@dataclass(frozen=True)
class Badge:
    kind: str  # "ok", "bad" or "neutral"
    text: str
    title: str = ""  # its tooltip: the detail behind the words


def badges(head: str) -> dict[str, Badge]:
    """A lane header's badges by name (`data-badge`: "identity", "replay", "untrained")."""
    found = re.findall(r'<span class="poss-badge (\w+)" data-badge="(\w+)"(?: title="([^"]*)")?>(.*?)</span>', head)
    return {name: Badge(kind, html.unescape(text), html.unescape(title)) for kind, name, title, text in found}


def where(head: str) -> str:
    """The line under a lane's figures that names where they come from (machine, precision, tree), as text."""
    m = re.search(r'<div class="poss-where"[^>]*>(.*?)</div>', head, re.S)
    assert m, f"no machine line in {head!r}"
    return html.unescape(re.sub(r"<[^>]+>", " ", m.group(1)))


def where_kind(head: str) -> str:
    """ "live" or "recorded": where a lane's figures were measured."""
    m = re.search(r'data-where="(\w+)"', head)
    assert m, f"no machine line in {head!r}"
    return m.group(1)


def here_figures(head: str) -> bool:
    """Whether a recording's lane header shows this machine's live figures beside its own."""
    return 'data-here="1"' in head


def identity(head: str) -> Badge:
    """The lane's identity badge (whether it reproduced plain decoding)."""
    return badges(head)["identity"]


def lane_state(head: str) -> str:
    """ "idle" (before a run), "running", "paused", or the finished lane's stop reason ("eos", "max_new_tokens",
    "cancelled", ...)."""
    m = re.search(r'data-lane-state="([^"]*)"', head)
    assert m, f"no lane state in {head!r}"
    return m.group(1)


def lane_title(head: str) -> str:
    m = re.search(r"<h3>(.*?)</h3>", head)
    assert m, f"no lane title in {head!r}"
    return html.unescape(m.group(1))


@dataclass
class Token:
    """One span of the token view: an emitted token, or (rejected=True) the draft the target rejected there."""

    source: str  # "draft", or the target's own token: "prefill", "plain", "bonus", "corrected"
    round: int
    title: str
    text: str
    position: int | None = None  # draft tokens: their shade's draft position and specialist (1-based)
    specialist: int | None = None
    rejected: bool = False
    classes: tuple[str, ...] = ()


class _Tokens(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tokens: list[Token] = []
        self._open: Token | None = None
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if self._open is not None:
            self._depth += 1
            return
        if "data-round" not in a:
            return
        classes = tuple((a.get("class") or "").split())
        rejected = "rej" in classes
        # A draft (accepted or rejected) has its shade classes; the target's own token names how it came.
        own = [c for c in classes if c not in ("tok", "target", "special")]
        source = "draft" if rejected or "draft" in classes else own[0]
        shade = {c[0]: int(c[1:]) for c in classes if c[:1] in ("p", "s") and c[1:].isdigit()}
        self._open = Token(
            source, int(a["data-round"]), a.get("title") or "", "", shade.get("p"), shade.get("s"), rejected, classes
        )
        self._depth = 0

    def handle_endtag(self, tag: str) -> None:
        if self._open is None:
            return
        if self._depth:
            self._depth -= 1
            return
        self._open.text = self._open.text.replace("↵\n", "\n")  # the newline mark is decoration
        self.tokens.append(self._open)
        self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open.text += data


def tokens(view: str, rejected: bool = False) -> list[Token]:
    """The token view's emitted tokens in order (with `rejected`, the rejected drafts too)."""
    parser = _Tokens()
    parser.feed(view)
    parser.close()
    return [t for t in parser.tokens if rejected or not t.rejected]


def view_classes(view: str) -> set[str]:
    """The token view's own classes: its colouring mode ("by-position", "by-specialist"), "hide-rej"."""
    m = re.search(r'<div class="poss-tokens ([^"]*)"', view)
    assert m, f"not a token view: {view!r}"
    return set(m.group(1).split())
