"""Where a draft tree's labels go: beside, above or below each marker, cut to the room there is (the hover keeps the
whole text), so that at the narrowest lane's width no label runs into another label, a marker or the plot's edge.

Everything here is in pixels of the plot area, y upwards; a label's width is estimated from its characters, with a
character as wide as CHAR_EM of its font (generous: a real label is narrower, never wider, in the fonts browsers use).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CHAR_EM = 0.62  # a character's width in em of its font: DejaVu Sans' average, wider than Arial's or Open Sans'
GAP_PX = 3.0  # between a marker and its label, and between two labels
ELLIPSIS = "…"
# Plotly's textposition for each side a label may take.
POSITIONS = {"right": "middle right", "left": "middle left", "top": "top center", "bottom": "bottom center"}


@dataclass(frozen=True)
class Box:
    """A rectangle in the plot's pixels (y upwards)."""

    left: float
    right: float
    bottom: float
    top: float

    def overlaps(self, other: Box) -> bool:
        return (
            self.left < other.right and other.left < self.right and self.bottom < other.top and other.bottom < self.top
        )

    def within(self, other: Box) -> bool:
        return (
            self.left >= other.left
            and self.right <= other.right
            and self.bottom >= other.bottom
            and self.top <= other.top
        )


@dataclass(frozen=True)
class Mark:
    """A marker to label: its centre and radius in pixels, its label and font size, the sides it may take in order of
    preference."""

    x: float
    y: float
    radius: float
    text: str
    font: float
    sides: tuple[str, ...] = ("right", "top", "bottom")

    def box(self) -> Box:
        return Box(self.x - self.radius, self.x + self.radius, self.y - self.radius, self.y + self.radius)


@dataclass(frozen=True)
class Placed:
    """A label as drawn: its (possibly cut) text, its Plotly textposition and the box it takes (None: no label)."""

    text: str
    position: str
    box: Box | None


def text_px(text: str, font: float) -> float:
    return len(text) * CHAR_EM * font


def cut(text: str, width: float, font: float) -> str:
    """`text`, or its start and "…" in at most `width` pixels; "" where not even two characters fit."""
    chars = int(width // (CHAR_EM * font))
    if chars >= len(text):
        return text
    return text[: chars - 1] + ELLIPSIS if chars >= 2 else ""


def band(mark: Mark, side: str) -> tuple[float, float]:
    """The label's vertical extent (bottom, top) on `side`."""
    half = mark.font / 2
    if side == "top":
        return mark.y + mark.radius + GAP_PX, mark.y + mark.radius + GAP_PX + mark.font
    if side == "bottom":
        return mark.y - mark.radius - GAP_PX - mark.font, mark.y - mark.radius - GAP_PX
    return mark.y - half, mark.y + half


def room(mark: Mark, side: str, obstacles: Sequence[Box], frame: Box) -> float:
    """The widest label `mark` can take on `side` without touching an obstacle or leaving the frame."""
    bottom, top = band(mark, side)
    if bottom < frame.bottom or top > frame.top:
        return 0.0
    level = [b for b in obstacles if b.bottom < top and bottom < b.top]
    if side == "right":
        start, limit = mark.x + mark.radius + GAP_PX, frame.right
        for b in level:
            if b.left < start < b.right:
                return 0.0
            if b.left >= start:
                limit = min(limit, b.left - GAP_PX)
        return max(0.0, limit - start)
    if side == "left":
        start, limit = mark.x - mark.radius - GAP_PX, frame.left
        for b in level:
            if b.left < start < b.right:
                return 0.0
            if b.right <= start:
                limit = max(limit, b.right + GAP_PX)
        return max(0.0, start - limit)
    low, high = frame.left, frame.right  # above or below: centred on the marker
    for b in level:
        if b.left <= mark.x <= b.right:
            return 0.0
        if b.left > mark.x:
            high = min(high, b.left - GAP_PX)
        else:
            low = max(low, b.right + GAP_PX)
    return max(0.0, 2 * min(mark.x - low, high - mark.x))


def label_box(mark: Mark, side: str, width: float) -> Box:
    bottom, top = band(mark, side)
    if side == "right":
        left = mark.x + mark.radius + GAP_PX
    elif side == "left":
        left = mark.x - mark.radius - GAP_PX - width
    else:
        left = mark.x - width / 2
    return Box(left, left + width, bottom, top)


def place(marks: Sequence[Mark], frame: Box) -> list[Placed]:
    """Each mark's label, in the order given (earlier marks choose first: give the most telling ones first): on the
    first side where it fits whole, else cut to the side with the most room."""
    obstacles = [m.box() for m in marks]
    placed = []
    for mark in marks:
        rooms = {side: room(mark, side, obstacles, frame) for side in mark.sides}
        whole = text_px(mark.text, mark.font)
        side = next((s for s in mark.sides if rooms[s] >= whole), max(mark.sides, key=lambda s: rooms[s]))
        text = cut(mark.text, rooms[side], mark.font)
        box = label_box(mark, side, text_px(text, mark.font)) if text else None
        if box is not None:
            obstacles.append(box)
        placed.append(Placed(text, POSITIONS[side], box))
    return placed
