"""The draft tree of one round as a Plotly figure: nodes by depth, coloured by specialist, sized by path
probability, the accepted path drawn thick and the target's own token after it. Where everything goes is
`tree_geometry`'s; this module draws it, in the charts' style (`figures`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go

from ..rounds.events import RoundEvent
from .figures import empty_figure, plotly_text, style_figure
from .palette import FONT_COLOR, GRID_COLOR, TARGET_COLOR, specialist_color
from .tree_geometry import (
    BONUS_FONT,
    BONUS_SIZE,
    ROOT_CHARS,
    ROOT_SIZE,
    TREE_SIDE_PX,
    cut_chars,
    node_size,
    tree_font,
    tree_labels,
    tree_layout,
    tree_x_range,
)
from .tree_labels import Placed

Points = tuple[list[float], list[float]]  # (x, y) of the root (index 0) and each node (index i+1)


def tree_figure(
    event: RoundEvent | None,
    labels: Sequence[str] | None = None,
    root_label: str = "root",
    bonus_label: str | None = None,
    title: str | None = None,
    height: int = 420,
) -> go.Figure:
    """The draft tree of one round: nodes by depth, labelled with their token, coloured by specialist, sized by
    cumulative draft probability; the accepted path drawn thick, rejected branches faded, and the target's
    bonus token as a diamond after the accepted path.

    `labels` gives each node's token text (default: the token id); traces are named "edges", "accepted path",
    "specialist S<k>" (one per specialist), "root" and "target's token"."""
    blank = blank_tree(event, height, title)
    if blank is not None:
        return blank
    labels = list(labels) if labels is not None else [str(n.token) for n in event.nodes]
    x, y = tree_layout(event)
    text_size = tree_font(y)
    bonus_text = bonus_label if bonus_label is not None else str(event.bonus)
    last = event.accepted[-1] + 1 if event.accepted else 0
    bx, by = x[last] + 1, y[last]
    x_range = tree_x_range(max(max(x), bx), cut_chars(root_label, ROOT_CHARS), text_size)
    y_range = (min(y) - 0.8, 0.8)
    root_at, bonus_at, at = tree_labels(event, labels, root_label, bonus_text, (x, y, bx, by), x_range, y_range, height)

    fig = go.Figure()
    fig.add_traces(edge_traces(event, (x, y), (bx, by)))
    for spec in sorted({n.specialist for n in event.nodes}):
        fig.add_trace(specialist_trace(event, spec, labels, (x, y), at, text_size))
    fig.add_trace(root_trace(root_label, root_at, y[0], text_size))
    fig.add_trace(bonus_trace(bonus_text, bonus_at, (bx, by)))
    fig.update_xaxes(
        title_text="draft position (depth)", tickvals=list(range(int(max(max(x), bx)) + 1)), range=list(x_range)
    )
    fig.update_yaxes(visible=False, range=list(y_range))
    style_figure(fig, title or f"Draft tree, round {event.round}", height, tree_subtitle(event, bonus_text, bonus_at))
    fig.update_layout(margin={"l": TREE_SIDE_PX, "r": TREE_SIDE_PX})  # the y axis is hidden: no room kept for it
    return fig


def blank_tree(event: RoundEvent | None, height: int, title: str | None) -> go.Figure | None:
    """A blank figure saying why a round has no tree to draw (none yet, the prefill, plain decoding, generate's
    hidden candidates); None where it has one."""
    if event is None:
        return empty_figure("No round yet.", height, title or "Draft tree")
    if event.nodes:
        return None
    head = title or f"Draft tree, round {event.round}"
    if event.prefill:
        return empty_figure("Prefill round: the target reads the prompt; nothing is drafted.", height, head)
    if not event.draft_observed:
        return empty_figure(
            "No candidate was kept this round: transformers' generate does not show what, if "
            "anything, was proposed and rejected.",
            height,
            head,
        )
    return empty_figure("Plain decoding drafts nothing: one target token per round.", height, head)


def edge_traces(event: RoundEvent, points: Points, bonus_at: tuple[float, float]) -> list[go.Scatter]:
    """The edges from each node to its parent, faint, and the accepted path, thick, on to the target's token."""
    x, y = points
    accepted = set(event.accepted)
    ex, ey, ax, ay = [], [], [], []
    for i, n in enumerate(event.nodes):
        px, py = x[n.parent + 1], y[n.parent + 1]
        tx, ty = (ax, ay) if i in accepted else (ex, ey)
        tx += [px, x[i + 1], None]
        ty += [py, y[i + 1], None]
    last = event.accepted[-1] + 1 if event.accepted else 0
    edges = go.Scatter(
        x=ex,
        y=ey,
        mode="lines",
        name="edges",
        line={"color": GRID_COLOR, "width": 1.2},
        hoverinfo="skip",
        showlegend=False,
    )
    path = go.Scatter(
        x=ax + [x[last], bonus_at[0]],
        y=ay + [y[last], bonus_at[1]],
        mode="lines",
        name="accepted path",
        line={"color": TARGET_COLOR, "width": 4},
        hoverinfo="skip",
    )
    return [edges, path]


def specialist_trace(
    event: RoundEvent, spec: int, labels: Sequence[str], points: Points, at: Sequence[Placed], text_size: int
) -> go.Scatter:
    """The nodes specialist `spec` drafted, each with its placed label and, on hover, its probabilities."""
    x, y = points
    nodes, accepted = event.nodes, set(event.accepted)
    idx = [i for i, n in enumerate(nodes) if n.specialist == spec]
    return go.Scatter(
        x=[x[i + 1] for i in idx],
        y=[y[i + 1] for i in idx],
        mode="markers+text",
        name=f"specialist S{spec + 1}",
        text=[plotly_text(at[i].text) for i in idx],  # token texts: a saved run's may be anything
        textposition=[at[i].position for i in idx],
        textfont={"size": text_size},
        marker={
            "color": specialist_color(spec),
            "size": [node_size(nodes[i].score) for i in idx],
            "opacity": [1.0 if i in accepted else 0.4 for i in idx],
            "line": {"color": [TARGET_COLOR if i in accepted else "rgba(0,0,0,0)" for i in idx], "width": 3},
        },
        customdata=[node_hover(event, i, labels[i]) for i in idx],
        hovertemplate="%{customdata[6]} (node %{customdata[0]}, position %{customdata[1]})<br>"
        f"specialist S{spec + 1}; %{{customdata[5]}}<br>draft p %{{customdata[2]:.3f}}, "
        "path p %{customdata[3]:.3f}<br>target p %{customdata[4]:.3f}<extra></extra>",
    )


def node_hover(event: RoundEvent, i: int, label: str) -> list:
    """Node `i`'s hover data: index, depth, draft p, path p, target p, accepted or not, and its whole text."""
    node = event.nodes[i]
    return [
        i,
        node.depth,
        node.draft_prob,
        math.exp(node.score),
        event.target_probs[i] if i < len(event.target_probs) else float("nan"),
        "accepted" if i in event.accepted else "rejected",
        plotly_text(repr(label)),
    ]


def root_trace(root_label: str, root_at: Placed, root_y: float, text_size: int) -> go.Scatter:
    """The root: a grey square for the last verified token, its label cut to ROOT_CHARS."""
    return go.Scatter(
        x=[0],
        y=[root_y],
        mode="markers+text",
        name="root",
        text=[plotly_text(root_at.text)],
        textposition=root_at.position,
        textfont={"size": text_size},
        marker={"color": FONT_COLOR, "size": ROOT_SIZE, "symbol": "square"},
        customdata=[plotly_text(repr(root_label))],
        hovertemplate="%{customdata}: the root, the last verified token<extra></extra>",
        showlegend=False,
    )


def bonus_trace(bonus_text: str, bonus_at: Placed, point: tuple[float, float]) -> go.Scatter:
    """The target's own token (bonus or correction) as a diamond after the accepted path."""
    return go.Scatter(
        x=[point[0]],
        y=[point[1]],
        mode="markers+text",
        name="target's token",
        text=[plotly_text(bonus_at.text)],
        textposition=bonus_at.position,
        textfont={"size": BONUS_FONT, "color": TARGET_COLOR},
        marker={"color": TARGET_COLOR, "size": BONUS_SIZE, "symbol": "diamond"},
        hovertemplate=f"{plotly_text(repr(bonus_text))}: the target's own token (bonus/correction)<extra></extra>",
    )


def tree_subtitle(event: RoundEvent, bonus_text: str, bonus_at: Placed) -> str:
    """What the tree shows in numbers: drafted, accepted, the target's token (named here where its label was cut)."""
    whole = str(bonus_text).strip()
    named = f" ({plotly_text(whole)})" if bonus_at.text != whole else ""  # no room beside the diamond: said here
    plus = " (then the answer ended)" if event.past_end else f", +1 target token{named}"
    if not event.draft_observed:
        return (
            f"{event.accept_len} candidates accepted{plus}; what was rejected is not observable through "
            "transformers' generate"
        )
    return f"{len(event.nodes)} drafted, {event.accept_len} accepted{plus}; size = path probability"
