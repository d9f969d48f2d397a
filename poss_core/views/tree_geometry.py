"""Where a draft tree's parts go in a lane's figure: each node by depth and score, marker sizes, the axis range, and
every label placed (tree_labels.place) for the narrowest lane, a 390 px phone's, whose lane is a ~326 px figure."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..rounds.events import RoundEvent
from .tree_labels import CHAR_EM, GAP_PX, Box, Mark, Placed, place, text_px

TREE_PLOT_PX = 300.0  # the tree's plot width there, less its side margins
TREE_SIDE_PX = 8  # the tree's left and right margins: its y axis is hidden and needs none
TREE_FRAME_PX = 130  # a tree figure's height less its plot's (the title block and the x axis)
ROOT_SIZE, BONUS_SIZE, BONUS_FONT = 12, 14, 13  # the root's square, the target token's diamond and its label
ROOT_CHARS = 12  # the root's label (the last verified token) is cut after this many characters
TAIL_CHARS = 6  # room after the deepest column for this many characters of a label


def tree_layout(event: RoundEvent) -> tuple[list[float], list[float]]:
    """(x, y) of the root (index 0) and each node (index i+1): x is the depth, y stacks leaves best-scored first."""
    m = len(event.nodes)
    kids: list[list[int]] = [[] for _ in range(m + 1)]
    for i, n in enumerate(event.nodes):
        kids[n.parent + 1].append(i + 1)
    for k in kids:
        k.sort(key=lambda slot: -event.nodes[slot - 1].score)
    y = [0.0] * (m + 1)
    next_leaf = [0]

    def place(slot: int) -> float:
        if not kids[slot]:
            y[slot] = -float(next_leaf[0])
            next_leaf[0] += 1
        else:
            ys = [place(c) for c in kids[slot]]
            y[slot] = (max(ys) + min(ys)) / 2
        return y[slot]

    place(0)
    x = [0.0] + [float(n.depth) for n in event.nodes]
    return x, y


def tree_font(y: Sequence[float]) -> int:
    """The node labels' font size: smaller where many leaves share the height."""
    return 11 if -min(y) < 20 else 9


def node_size(score: float) -> float:
    """A node's marker diameter in pixels: larger the likelier its path."""
    return 8 + 18 * math.exp(score) if math.isfinite(score) else 14


def tree_x_range(depth: float, root_text: str, font: float) -> tuple[float, float]:
    """The tree's x-axis range at TREE_PLOT_PX: room for the root's label (up to ROOT_CHARS) left of depth 0, and for
    TAIL_CHARS of a label after the deepest column."""
    left = ROOT_SIZE / 2 + 2 * GAP_PX + text_px(root_text, font)
    right = node_size(0.0) / 2 + 2 * GAP_PX + TAIL_CHARS * CHAR_EM * BONUS_FONT
    unit = (TREE_PLOT_PX - left - right) / max(depth, 1.0)
    return -left / unit, max(depth, 1.0) + right / unit


def tree_labels(
    event: RoundEvent,
    labels: Sequence[str],
    root_label: str,
    bonus_label: str,
    points: tuple[list[float], list[float], float, float],
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    height: int,
) -> tuple[Placed, Placed, list[Placed]]:
    """The root's, the target token's and each node's label as drawn (tree_labels.place) at TREE_PLOT_PX: whole
    where there is room, else cut with "…" (the hover has them whole). The root and the target's token choose first,
    then the accepted path, then the other nodes, likeliest first."""
    x, y, bx, by = points
    font = tree_font(y)
    plot_h = height - TREE_FRAME_PX
    frame = Box(0.0, TREE_PLOT_PX, 0.0, plot_h)

    def px(u: float, v: float) -> tuple[float, float]:
        return (
            (u - x_range[0]) / (x_range[1] - x_range[0]) * TREE_PLOT_PX,
            (v - y_range[0]) / (y_range[1] - y_range[0]) * plot_h,
        )

    def radius(i: int) -> float:  # an accepted node's outline adds to its marker
        return node_size(event.nodes[i].score) / 2 + (1.5 if i in event.accepted else 0)

    order = list(event.accepted) + sorted(
        (i for i in range(len(event.nodes)) if i not in event.accepted), key=lambda i: (-event.nodes[i].score, i)
    )
    marks = [
        Mark(*px(0, y[0]), ROOT_SIZE / 2, cut_chars(root_label, ROOT_CHARS), font, ("left", "top", "bottom")),
        Mark(*px(bx, by), BONUS_SIZE / 2, str(bonus_label).strip(), BONUS_FONT),
    ] + [Mark(*px(x[i + 1], y[i + 1]), radius(i), str(labels[i]).strip(), font) for i in order]
    root, bonus, *rest = place(marks, frame)
    by_node = dict(zip(order, rest))
    return root, bonus, [by_node[i] for i in range(len(event.nodes))]


def cut_chars(text: str, chars: int) -> str:
    """`text` without its outer spaces (SVG drops them), cut to `chars` characters with "…"."""
    text = str(text).strip()
    return text if len(text) <= chars else text[: chars - 1] + "…"
