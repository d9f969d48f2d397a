"""Every chart fitted to the page's panels before it is sent: its legend below the plot (where it cannot cover the
title, however many entries wrap), and its subtitle lines wrapped at their separators (a panel is half the page, or a
phone's width, and Plotly never wraps a title)."""

from __future__ import annotations

import re
from typing import Any

import plotly.graph_objects as go

# A line's most characters: what a 390 px phone's chart (about 326 px) holds at the subtitles' and the title's sizes.
SUBTITLE_CHARS = 58
TITLE_CHARS = 40
TITLE_LINE_PX = 20  # the height a title or subtitle line takes
TITLE_TOP_PX = 16  # above the first title line
FITTED = "fitted to the page"  # layout.meta of a figure fit() has changed: a second fit leaves it as it is
LEGEND_ROW_PX = 22  # a row of legend entries under the plot
LEGEND_PER_ROW = 4  # entries a row holds in a half-page panel (a wider panel holds more: the estimate errs high)
# The toolbar keeps saving, zooming, panning and resetting: fewer buttons, so that on hover it ends right of the title.
MODEBAR_REMOVED = ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d"]


def wrap_line(line: str, width: int = SUBTITLE_CHARS) -> list[str]:
    """One subtitle line cut into lines of at most `width` characters at its separators ("; ", ", "), never inside a
    figure such as "EAGLE n=12"; a piece longer than `width` with no separator is cut at its spaces."""
    pieces = [word for piece in re.split(r"(?<=[;,]) ", line) for word in words_of(piece, width)]
    lines: list[str] = []
    for piece in pieces:
        if lines and len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return lines


def words_of(piece: str, width: int) -> list[str]:
    """`piece` whole where it fits in `width` characters, else its words (a long title with no separator)."""
    return [piece] if len(piece) <= width else piece.split(" ")


def wrapped_title(text: str, width: int = SUBTITLE_CHARS) -> tuple[str, int]:
    """A figures.py title (the title, then `<br><sup>line</sup>` per subtitle line) with each subtitle line wrapped;
    returns the text and its number of lines."""
    head, *subs = text.split("<br>")
    lines = wrap_line(head, TITLE_CHARS * width // SUBTITLE_CHARS)
    for sub in subs:
        inner = sub.removeprefix("<sup>").removesuffix("</sup>")
        lines += [f"<sup>{part}</sup>" for part in wrap_line(inner, width)]
    return "<br>".join(lines), len(lines)


def fit(fig: Any, width: int = SUBTITLE_CHARS) -> Any:
    """`fig` (a Plotly figure; anything else passes as it is) with its subtitles wrapped, the top margin fitted to
    them, and a legend that shows moved under the plot, left-aligned (Plotly grows the bottom margin to hold it)."""
    if not isinstance(fig, go.Figure) or fig.layout.meta == FITTED:
        return fig
    grow = 0
    title = fig.layout.title.text or ""
    if title:
        text, lines = wrapped_title(title, width)
        top = TITLE_TOP_PX + TITLE_LINE_PX * lines
        grow += max(0, top - (fig.layout.margin.t or 0))
        fig.update_layout(title={"text": text, "y": 1.0, "yanchor": "top", "pad": {"t": 10}}, margin={"t": top})
    entries = [t for t in fig.data if t.showlegend is not False and t.name and t.type != "heatmap"]
    if entries:
        grow += LEGEND_ROW_PX * -(-len(entries) // LEGEND_PER_ROW)
        fig.update_layout(
            legend={
                "orientation": "h",
                "yref": "container",
                "y": 0.0,
                "yanchor": "bottom",
                "xanchor": "left",
                "x": 0.0,
            }
        )
    if grow and fig.layout.height:
        fig.update_layout(height=fig.layout.height + grow)  # the plot keeps its own height
    fig.update_layout(meta=FITTED, modebar={"remove": MODEBAR_REMOVED})
    return fig
