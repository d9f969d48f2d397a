"""Figures that read on a phone, checked on the figure objects: a draft tree's labels lie whole or cut inside its plot
and never on another label or marker at the narrowest lane's width; the specialist strip names every row of eight
methods, each row tall enough for its name; every chart's title lines fit a 390 px phone's chart, and its toolbar is
short; a blank figure's message is wrapped to that width."""

from __future__ import annotations

import re

import pytest

from app.sessions import recordings
from app.views import chart_fit, chart_view, render
from poss_core.models.presets import DEFAULT_PRESET
from poss_core.rounds.events import DraftNode, RoundEvent
from poss_core.views import draft_tree, figures, tree_geometry, tree_labels
from poss_core.views.tree_labels import Box, Mark

MIN_STRIP_ROW_PX = 16  # a strip row's least height: a 10 px name with room above and below


def chain_event(depth: int) -> RoundEvent:
    """A round whose tree is one chain, all accepted but the last: every label's neighbour sits in its row."""
    nodes = [
        DraftNode(token=i, parent=i - 1, depth=i + 1, score=-0.1 * i, draft_prob=0.9, specialist=0)
        for i in range(depth)
    ]
    return RoundEvent(
        round=3,
        nodes=nodes,
        accepted=list(range(depth - 1)),
        bonus=99,
        target_probs=[0.9] * depth,
        feature_deviation=[],
        draft_ms=1.0,
        verify_ms=1.0,
        new_tokens=depth,
    )


def drawn_labels(fig) -> tuple[list[Box], list[Box], Box]:
    """The label boxes and marker boxes a tree figure draws, in tree_labels' pixels, and its plot's frame."""
    (x_lo, x_hi), (y_lo, y_hi) = fig.layout.xaxis.range, fig.layout.yaxis.range
    plot_h = fig.layout.height - tree_geometry.TREE_FRAME_PX
    labels, markers = [], []
    for trace in fig.data:
        if trace.mode != "markers+text":
            continue
        sizes = trace.marker.size if isinstance(trace.marker.size, tuple) else [trace.marker.size] * len(trace.x)
        font = trace.textfont.size
        positions = trace.textposition if isinstance(trace.textposition, tuple) else [trace.textposition] * len(trace.x)
        for x, y, text, size, position in zip(trace.x, trace.y, trace.text, sizes, positions):
            px = (x - x_lo) / (x_hi - x_lo) * tree_geometry.TREE_PLOT_PX
            py = (y - y_lo) / (y_hi - y_lo) * plot_h
            mark = Mark(px, py, size / 2, "", font)
            markers.append(mark.box())
            shown = re.sub(r"&\w+;", "_", text)  # an entity is one character on screen
            side = {v: k for k, v in tree_labels.POSITIONS.items()}[position]
            if shown:
                labels.append(tree_labels.label_box(mark, side, tree_labels.text_px(shown, font)))
    return labels, markers, Box(0.0, tree_geometry.TREE_PLOT_PX, 0.0, plot_h)


def assert_labels_apart(fig) -> None:
    labels, markers, frame = drawn_labels(fig)
    for i, a in enumerate(labels):
        assert a.within(frame), (a, frame)
        assert not any(a.overlaps(b) for b in labels[i + 1 :]), a
        assert not any(a.overlaps(m) for m in markers), a


def recorded_trees(lanes: int = 3, rounds: int = 40):
    """The draft trees of the first example's recording on the default preset, as its lanes draw them."""
    comp = recordings.recording_for(0, DEFAULT_PRESET)
    for lane in comp.lanes[:lanes]:
        for r in range(1, min(rounds, len(lane.events))):
            if lane.events[r].nodes:
                yield lane.events[r], render.lane_tree(lane, r)


def test_a_recorded_trees_labels_lie_inside_its_plot_apart_from_each_other_and_the_markers():
    trees = list(recorded_trees())
    assert len(trees) > 30
    for _, fig in trees:
        assert_labels_apart(fig)


def test_the_root_label_is_whole_and_a_cut_label_is_whole_in_its_hover():
    for event, fig in recorded_trees(rounds=12):
        root = next(t for t in fig.data if t.name == "root")
        assert root.text[0].rstrip("…") in root.customdata[0]
        whole = root.customdata[0][1:-1].strip()  # the hover's repr() of the root's text
        assert root.textposition == "middle left"
        assert root.text[0] == (
            whole if len(whole) <= tree_geometry.ROOT_CHARS else whole[: tree_geometry.ROOT_CHARS - 1] + "…"
        )
        for trace in fig.data:
            if trace.name.startswith("specialist"):
                for text, data in zip(trace.text, trace.customdata):
                    assert text.removesuffix("…") in data[6], (text, data[6])


def test_labels_of_a_chain_in_one_row_are_cut_or_moved_never_run_together():
    words = ["function", "returns", "the", "largest", "value", "found"]
    fig = draft_tree.tree_figure(chain_event(6), labels=words, root_label="unquestionably", bonus_label="whatever")
    assert_labels_apart(fig)
    root = next(t for t in fig.data if t.name == "root")
    assert (
        root.text[0] == "unquestiona…" and root.customdata[0] == "'unquestionably'"
    )  # cut at ROOT_CHARS, whole on hover
    bonus = next(t for t in fig.data if t.name == "target's token")
    if bonus.text[0] != "whatever":  # no room beside the diamond: the subtitle names it
        assert "whatever" in fig.layout.title.text


def test_place_moves_a_label_above_where_the_right_is_taken_and_cuts_where_nothing_is_free():
    frame = Box(0, 200, 0, 100)
    left, right = Mark(50, 50, 5, "function", 11), Mark(80, 50, 5, "returns", 11)
    a, b = tree_labels.place([left, right], frame)
    assert a.position == "top center" and a.text == "function"
    assert b.position == "middle right" and b.text == "returns"
    boxed = [Mark(50, 50, 5, "function", 11, ("right",)), Mark(70, 50, 5, "x", 11)]
    assert tree_labels.place(boxed, frame)[0].text == ""  # under two characters of room: no label at all
    roomy = [Mark(50, 50, 5, "function", 11, ("right",)), Mark(105, 50, 5, "x", 11)]
    assert tree_labels.place(roomy, frame)[0].text.endswith("…")


def pooled_runs(n: int) -> tuple[dict, dict]:
    """`n` draft methods' rounds, as "all my runs" pools them."""
    comp = recordings.recording_for(0, DEFAULT_PRESET)
    draft = next(lane for lane in comp.lanes if lane.events and any(e.nodes for e in lane.events))
    runs = {f"Method-{i + 1}": draft.events for i in range(n)}
    return runs, {}


@pytest.mark.parametrize("methods", [2, 8])
def test_the_strip_names_every_row_and_each_row_has_room_for_its_name(methods):
    runs, _ = pooled_runs(methods)
    fig = chart_fit.fit(figures.pos_acc_figure(runs, specialist_bands={label: [0, 1, 2] for label in runs}))
    strip = next(t for t in fig.data if t.type == "heatmap")
    assert list(fig.layout.yaxis2.tickvals) == list(strip.y) and len(strip.y) == methods
    plot_h = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
    domain = fig.layout.yaxis2.domain
    assert (domain[1] - domain[0]) * plot_h / methods >= MIN_STRIP_ROW_PX
    chart = fig.layout.yaxis.domain
    assert (chart[1] - chart[0]) * plot_h >= 380 - figures.CHART_FRAME_PX - 40  # the chart keeps its own height


def visible(line: str) -> str:
    """A title line as it shows: tags gone, an entity one character."""
    return re.sub(r"&\w+;", "_", re.sub(r"<[^>]+>", "", line))


def test_every_charts_title_lines_fit_a_phones_chart_and_its_toolbar_is_short():
    runs, colors = pooled_runs(8)
    drawn = [
        *chart_view._charts(
            runs, colors, "All my runs: 12 runs pooled; settings varied across runs", True, None
        ).values(),
        figures.heldout_top1_figure({"EAGLE": [0.8, 0.6]}),
        next(recorded_trees(rounds=3))[1],
    ]
    for fig in [chart_fit.fit(f) for f in drawn if f is not None]:
        title, *subtitles = fig.layout.title.text.split("<br>")
        assert len(visible(title)) <= chart_fit.TITLE_CHARS, title
        assert all(len(visible(line)) <= chart_fit.SUBTITLE_CHARS for line in subtitles), subtitles
        assert "lasso2d" in fig.layout.modebar.remove


def test_a_blank_figures_message_is_wrapped_to_a_phones_width():
    fig = draft_tree.tree_figure(chain_event(0))  # plain decoding: nothing drafted
    lines = fig.layout.annotations[0].text.split("<br>")
    assert len(lines) > 1 and all(len(line) <= figures.EMPTY_LINE_CHARS for line in lines)
