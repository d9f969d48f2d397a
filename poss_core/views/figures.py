"""Plotly figures: pure functions drawn by the app's Demo and Evidence tabs and the benchmark's HTML report.

The acceptance, deviation and histogram charts take runs as label -> RoundEvents (a lane, a pooled benchmark method)
or label -> `metrics.AcceptanceStats` (what a benchmark summary keeps), so live lanes and a stored summary go
through the same drawing code (`chart_data` reads them off both). Every number drawn comes from `rounds.metrics`;
this module only lays it out, in its colours (`palette`) and one style, which the draft tree (`draft_tree`) shares.
Each chart names its sample size (rounds, accepted positions, questions or runs) so nobody reads noise as a result,
and rates carry their Wilson 95% intervals.

Plotly draws every label (trace names, hover texts, axis categories, node texts, titles) through its own HTML subset
(`<a href>`, `<b>`, `<i>`, `<br>`, `<span style>`, `<sub>`, `<sup>`): method, dataset and token texts come from
files a user loads, so each goes through `plotly_text` before it reaches a figure and shows as text.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..rounds import metrics
from ..rounds.metrics import AcceptanceStats, Estimate
from .chart_data import DEVIATION_TITLES, DEVIATION_UNITS, Runs, acceptance_of, deviation_kind_shown, drafted_runs
from .palette import FONT_COLOR, GRID_COLOR, run_colors, specialist_color

EMPTY_LINE_CHARS = 38  # a blank figure's message line: what a phone's chart (~326 px) holds at its 14 px
# The specialist strip under the acceptance chart: a row per run, each tall enough for its name and cells' text.
STRIP_ROW_PX, STRIP_GAP_PX, STRIP_FONT = 20, 14, 10
STRIP_CELL_FONT = 9  # a cell's "S2 85%" within a phone's column
CHART_FRAME_PX = 120  # a chart's height less its plot's (the title block and the x axis)

POS_ACC_FORMULA = "pos-acc<sub>k</sub>: of rounds that accepted k−1 and drafted k, the share that accepted k"
POS_RATE_FORMULA = "rate<sub>k</sub>: of rounds that drafted k, the share that accepted ≥ k"


def plotly_text(text: object) -> str:
    """Untrusted text as Plotly shows it literally: `&`, `<` and `>` as entities (Plotly decodes them after reading
    its tags), and the `{` of `%{` as one, so a hover template does not read the text as one of its variables."""
    return html.escape(str(text), quote=False).replace("%{", "%&#123;")


def _none_for_nan(values: Sequence[float]) -> list[float | None]:
    return [None if (v is None or (isinstance(v, float) and math.isnan(v))) else v for v in values]


def style_figure(fig: go.Figure, title: str, height: int = 340, subtitle: str = "", note: str = "") -> go.Figure:
    """Title, subtitle (the sample size) and an optional second line `note` (what the runs are, e.g. pooled)."""
    lines = [line for line in (subtitle, plotly_text(note)) if line]
    text = "".join([plotly_text(title)] + [f"<br><sup>{line}</sup>" for line in lines])
    fig.update_layout(
        title={"text": text, "x": 0.01, "xanchor": "left", "font": {"size": 15}},
        height=height,
        margin={"l": 52, "r": 16, "t": 46 + 24 * len(lines), "b": 46},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        font={"color": FONT_COLOR, "size": 12},
        legend={
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.0,
            "xanchor": "right",
            "x": 1.0,
            "bgcolor": "rgba(0,0,0,0)",
        },
        hoverlabel={"font": {"size": 12}},
    )
    fig.update_xaxes(gridcolor=GRID_COLOR, zerolinecolor=GRID_COLOR, linecolor=GRID_COLOR)
    fig.update_yaxes(gridcolor=GRID_COLOR, zerolinecolor=GRID_COLOR, linecolor=GRID_COLOR)
    return fig


def empty_figure(message: str, height: int = 300, title: str = "") -> go.Figure:
    """A blank figure that says why it is blank (no rounds yet, plain decoding drafts nothing, ...)."""
    fig = go.Figure()
    fig.add_annotation(
        text="<br>".join(plotly_text(line) for line in textwrap.wrap(message, EMPTY_LINE_CHARS)),
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        showarrow=False,
        font={"size": 14, "color": FONT_COLOR},
    )
    style_figure(fig, title, height)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _sample_sizes(stats: Mapping[str, AcceptanceStats]) -> str:
    return "rounds: " + ", ".join(f"{plotly_text(label)} n={s.rounds}" for label, s in stats.items())


def _error_bars(values: Sequence[float], intervals: Sequence[tuple[float, float]], color: str | None) -> dict:
    """Plotly's asymmetric error bars for an interval around each value (none where either is missing)."""

    def gap(a: float, b: float) -> float | None:
        return None if any(v is None or math.isnan(v) for v in (a, b)) else max(0.0, a - b)

    return {
        "type": "data",
        "symmetric": False,
        "array": [gap(hi, v) for v, (_, hi) in zip(values, intervals)],
        "arrayminus": [gap(v, lo) for v, (lo, _) in zip(values, intervals)],
        "color": color,
        "thickness": 1.3,
        "width": 4,
    }


def pos_acc_figure(
    runs: Runs,
    conditional: bool = True,
    specialist_bands: bool | Mapping[str, Sequence[int]] | None = True,
    depth: int | None = None,
    colors: Mapping[str, str] | None = None,
    height: int = 380,
    note: str = "",
) -> go.Figure:
    """Position-wise acceptance per draft position, one line per run on shared axes, each point with its Wilson 95%
    interval and (on hover) the rounds it rests on.

    conditional=True draws POSS's pos-acc_k over the rounds that accepted k-1 tokens and drafted position k; False
    the unconditional rate over the rounds that drafted k. A round that stopped drafting before k (a depth stop, the
    node budget) counts at neither. `specialist_bands` adds a strip under the chart showing, per run and position,
    which specialist drafted it and in what share of the rounds: True reads it off the runs, a mapping gives the
    specialist per position per run label, None/False leaves it out. Runs without draft rounds are skipped.
    `note` (here and in the other charts) is a second subtitle line saying what the runs are."""
    drafted = drafted_runs(acceptance_of(runs, depth))
    name = (
        "Position-wise acceptance, conditional (pos-acc)" if conditional else "Position-wise acceptance, unconditional"
    )
    if not drafted:
        return empty_figure("No draft rounds yet (plain decoding drafts nothing).", height, name)
    colors = run_colors(list(runs), known=colors)
    bands = band_specialists(drafted, specialist_bands)
    if bands:
        fig, height = strip_subplots(height, len(bands))
    else:
        fig = make_subplots(rows=1, cols=1)
    for label, st in drafted.items():
        fig.add_trace(pos_acc_trace(label, st, conditional, colors.get(label)), row=1, col=1)
    fig.update_yaxes(
        title_text="share accepted" if conditional else "share accepting ≥ k", range=[0, 1.05], row=1, col=1
    )
    if bands:
        labels = [plotly_text(label) for label in bands]
        fig.add_trace(specialist_strip(bands, drafted, labels), row=2, col=1)
        # Every row named: Plotly would otherwise skip every other category label once rows are close.
        fig.update_yaxes(
            tickfont={"size": STRIP_FONT}, tickmode="array", tickvals=labels, ticktext=labels, row=2, col=1
        )
    fig.update_xaxes(title_text="draft position k", dtick=1, row=2 if bands else 1, col=1)
    return style_figure(
        fig,
        name,
        height,
        f"{POS_ACC_FORMULA if conditional else POS_RATE_FORMULA}; bars: Wilson 95%; {_sample_sizes(drafted)}",
        note,
    )


def band_specialists(
    drafted: Mapping[str, AcceptanceStats], specialist_bands: bool | Mapping[str, Sequence[int]] | None
) -> dict[str, list[int]]:
    """The specialist per draft position of each drafted run the strip shows: read off the runs (True), given
    (a mapping by run label), or none."""
    if specialist_bands is True:
        return {label: st.specialists for label, st in drafted.items() if st.specialists}
    if isinstance(specialist_bands, Mapping):
        return {label: list(v) for label, v in specialist_bands.items() if label in drafted}
    return {}


def pos_acc_trace(label: str, st: AcceptanceStats, conditional: bool, color: str | None) -> go.Scatter:
    """One run's line of rates by draft position, with Wilson error bars and the counts behind each point."""
    values = st.rates(conditional)
    intervals = st.intervals(conditional)
    hits, base = st.counts(conditional)  # how many rounds each point rests on: the ratio's denominator
    return go.Scatter(
        x=list(range(1, len(values) + 1)),
        y=_none_for_nan(values),
        mode="lines+markers",
        name=plotly_text(label),
        line={"color": color, "width": 2.5},
        marker={"size": 8},
        error_y=_error_bars(values, intervals, color),
        customdata=[[h, b, lo, hi] for h, b, (lo, hi) in zip(hits, base, intervals)],
        hovertemplate=f"{plotly_text(label)}<br>position %{{x}}: %{{y:.2f}} (95%: %{{customdata[2]:.2f}}–"
        "%{customdata[3]:.2f})<br>%{customdata[0]} of %{customdata[1]} rounds<extra></extra>",
    )


def specialist_strip(
    bands: Mapping[str, Sequence[int]], drafted: Mapping[str, AcceptanceStats], labels: Sequence[str]
) -> go.Heatmap:
    """The strip under the acceptance chart: a row per run (named `labels`), a cell per draft position coloured by
    the specialist that drafted it and saying in what share of the rounds."""
    width = max(len(v) for v in bands.values())
    z = [[(v[k] if k < len(v) else -1) for k in range(width)] for v in bands.values()]
    shares = [[(drafted[label].drafted_share() + [math.nan] * width)[k] for k in range(width)] for label in bands]
    n_spec = max(max(row) for row in z) + 1 if z else 1
    steps = max(n_spec, 1)
    return go.Heatmap(
        z=z,
        x=list(range(1, width + 1)),
        y=list(labels),
        zmin=-1.5,
        zmax=steps - 0.5,
        colorscale=specialist_scale(steps),
        showscale=False,
        xgap=2,
        ygap=2,
        name="specialists",
        text=[
            [("" if s < 0 else f"S{s + 1} {_share(sh)}") for s, sh in zip(row, sh_row)]
            for row, sh_row in zip(z, shares)
        ],
        texttemplate="%{text}",
        textfont={"size": STRIP_CELL_FONT},
        hovertemplate="%{y}: position %{x} drafted by specialist %{text} of rounds<extra></extra>",
    )


def specialist_scale(steps: int) -> list[list]:
    """A discrete colour scale: one flat step per specialist index (-1, never drafted, is transparent)."""
    scale = []
    for s in range(-1, steps):
        color = "rgba(0,0,0,0)" if s < 0 else specialist_color(s)
        lo, hi = (s + 1) / (steps + 1), (s + 2) / (steps + 1)
        scale += [[lo, color], [hi, color]]
    return scale


def strip_subplots(height: int, rows: int) -> tuple[go.Figure, int]:
    """The acceptance chart's two plots, the chart over a strip of `rows` rows of STRIP_ROW_PX each, and the figure's
    height grown by the strip: the chart keeps its own height however many methods the strip lists."""
    chart_px, strip_px = height - CHART_FRAME_PX, STRIP_ROW_PX * rows
    total = chart_px + STRIP_GAP_PX + strip_px
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        row_heights=[chart_px, strip_px],
        vertical_spacing=STRIP_GAP_PX / total,
    )
    return fig, height + STRIP_GAP_PX + strip_px


def _share(value: float) -> str:
    return "" if value != value else f"{value:.0%}"


def feature_deviation_figure(
    runs: Runs,
    metric: str = "l2",
    colors: Mapping[str, str] | None = None,
    height: int = 340,
    note: str = "",
    kind: str = "every_position",
) -> go.Figure:
    """Mean deviation between the draft's predicted feature and the target's true feature, by draft position.

    `kind` (metrics.DEVIATION_KINDS) says where it is measured: "every_position" (the draft rolled forward over the
    tokens the target went on to write, from every position of them: no survivor bias), "continuation" (the same from
    each round's root only, where the last draft had just failed), "accepted" (accepted positions only:
    conditional on acceptance, so deep positions keep only the easy rounds), or the tree's nodes on / off the
    accepted path. `metric` is "l2" (L2 norm) or "cosine" (1 - cos); the hover shows both and the sample size."""
    if metric not in ("l2", "cosine"):
        raise ValueError(f"metric={metric!r}: use 'l2' or 'cosine'.")
    if kind not in DEVIATION_TITLES:
        raise ValueError(f"kind={kind!r}: use one of {', '.join(DEVIATION_TITLES)}.")
    drafted = drafted_runs(acceptance_of(runs))
    kind = deviation_kind_shown(drafted, kind)
    title = f"Feature deviation by draft position, {DEVIATION_TITLES[kind]}"
    unit = DEVIATION_UNITS[kind]
    data = {label: st.deviation_of(kind) for label, st in drafted.items()}
    data = {label: d for label, d in data.items() if any(d["count"])}
    if not data:
        return empty_figure("No draft rounds with a measured deviation yet.", height, title)
    colors = run_colors(list(runs), known=colors)
    fig = go.Figure()
    for label, d in data.items():
        x = list(range(1, len(d["count"]) + 1))
        fig.add_trace(
            go.Scatter(
                x=x,
                y=d[metric],
                mode="lines+markers",
                name=plotly_text(label),
                line={"color": colors.get(label), "width": 2.5},
                marker={"size": 8},
                customdata=list(zip(d["l2"], d["cosine"], d["count"])),
                hovertemplate=f"{plotly_text(label)}<br>position %{{x}}<br>L2 %{{customdata[0]:.3f}}, cosine distance "
                f"%{{customdata[1]:.4f}}<br>over %{{customdata[2]}} {unit}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="draft position k", dtick=1)
    fig.update_yaxes(title_text="mean L2 distance" if metric == "l2" else "mean cosine distance", rangemode="tozero")
    counts = ", ".join(f"{plotly_text(label)} n={d['count'][0]}" for label, d in data.items())
    return style_figure(
        fig, title, height, f"draft's predicted vs target's true feature; {unit} at k=1: {counts}", note
    )


def accept_hist_figure(
    runs: Runs, depth: int | None = None, colors: Mapping[str, str] | None = None, height: int = 340, note: str = ""
) -> go.Figure:
    """Share of rounds that accepted exactly k draft tokens (k = 0..depth), grouped bars per run; hover gives counts."""
    title = "Accept-length histogram"
    drafted = drafted_runs(acceptance_of(runs, depth))
    if not drafted:
        return empty_figure("No draft rounds yet.", height, title)
    colors = run_colors(list(runs), known=colors)
    fig = go.Figure()
    for label, st in drafted.items():
        hist, total = st.hist, st.rounds
        fig.add_trace(
            go.Bar(
                x=list(range(len(hist))),
                y=[h / total for h in hist],
                name=plotly_text(label),
                marker_color=colors.get(label),
                customdata=[[h, total] for h in hist],
                hovertemplate=f"{plotly_text(label)}<br>accept_len %{{x}}: %{{y:.0%}} "
                "(%{customdata[0]} of %{customdata[1]} "
                "rounds)<extra></extra>",
            )
        )
    fig.update_layout(barmode="group", bargap=0.2)
    fig.update_xaxes(title_text="accepted draft tokens per round (accept_len)", dtick=1)
    fig.update_yaxes(title_text="share of rounds", tickformat=".0%", rangemode="tozero")
    taus = ", ".join(f"{plotly_text(label)} τ={st.tau:.2f}" for label, st in drafted.items())
    return style_figure(fig, title, height, f"{_sample_sizes(drafted)}; {taus}", note)


def tau_figure(
    taus: Mapping[str, Mapping[str, Estimate]],
    means: Mapping[str, Estimate] | None = None,
    colors: Mapping[str, str] | None = None,
    sizes: str = "",
    height: int = 380,
) -> go.Figure:
    """τ per dataset, grouped bars per method with their 95% intervals, and the mean of datasets (`means`, the
    paper's column) as the last group. `taus` maps a method's label to {dataset: Estimate} (its n: the rounds it
    rests on); `sizes` says how many questions."""
    title = "τ (mean acceptance length) per dataset"
    taus = {label: rows for label, rows in taus.items() if rows}
    if not taus:
        return empty_figure("No draft method in these results.", height, title)
    colors = run_colors(list(taus), known=colors)
    fig = go.Figure()
    for label, rows in taus.items():
        groups = {**rows, **({"mean of datasets": means[label]} if means and label in means else {})}
        values = [e.value for e in groups.values()]
        fig.add_trace(
            go.Bar(
                x=[plotly_text(g) for g in groups],
                y=_none_for_nan(values),
                name=plotly_text(label),
                marker_color=colors.get(label),
                error_y=_error_bars(values, [(e.low, e.high) for e in groups.values()], FONT_COLOR),
                customdata=[[e.low, e.high, e.n] for e in groups.values()],
                hovertemplate=f"{plotly_text(label)}<br>%{{x}}: τ %{{y:.2f}} "
                "(95%: %{customdata[0]:.2f}–%{customdata[1]:.2f})"
                "<br>%{customdata[2]} rounds<extra></extra>",
            )
        )
    fig.update_layout(barmode="group", bargap=0.2)
    fig.update_yaxes(title_text="τ: tokens per target forward", rangemode="tozero")
    rounds = ", ".join(f"{plotly_text(label)} n={sum(e.n for e in rows.values())}" for label, rows in taus.items())
    sizes = plotly_text(sizes)
    return style_figure(
        fig, title, height, f"bars: 95% bootstrap over questions; {sizes + '; ' if sizes else ''}rounds: {rounds}"
    )


def heldout_top1_figure(
    top1: Mapping[str, Sequence[float]],
    colors: Mapping[str, str] | None = None,
    sizes: str = "",
    height: int = 340,
    note: str = "",
) -> go.Figure:
    """Each draft's held-out top-1 agreement with the target by draft position (from its model card: sequences no
    draft trained on, every position unrolled as decoding sees it). No tree, no verification: the draft alone."""
    title = "Held-out top-1 agreement by draft position (training's own check)"
    top1 = {label: list(v) for label, v in top1.items() if v}
    if not top1:
        return empty_figure("No model card with held-out figures.", height, title)
    colors = run_colors(list(top1), known=colors)
    fig = go.Figure()
    for label, values in top1.items():
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(values) + 1)),
                y=values,
                mode="lines+markers",
                name=plotly_text(label),
                line={"color": colors.get(label), "width": 2.5},
                marker={"size": 8},
                hovertemplate=f"{plotly_text(label)}<br>position %{{x}}: %{{y:.3f}}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="draft position k", dtick=1)
    fig.update_yaxes(title_text="top-1 = target's next token")
    return style_figure(fig, title, height, sizes or "the draft's own top-1 vs the target's, decoding unroll", note)


def speedup_figure(
    speedups: Mapping[str, Estimate],
    tokens_per_s: Mapping[str, Estimate] | None = None,
    colors: Mapping[str, str] | None = None,
    height: int = 340,
    note: str = "",
    title: str = "Speed-up over plain decoding",
) -> go.Figure:
    """Speed-up over the faster plain decoder per method: the mean, and ± one std over runs as bars (the Estimate's
    low and high; its n: the runs). The hover adds tokens/s."""
    speedups = {label: e for label, e in speedups.items() if not math.isnan(e.value)}
    if not speedups:
        return empty_figure("No timed runs in these results.", height, title)
    colors = run_colors(list(speedups), known=colors)
    tps = tokens_per_s or {}
    labels = list(speedups)
    values = [speedups[lb].value for lb in labels]
    fig = go.Figure(
        go.Bar(
            x=[plotly_text(lb) for lb in labels],
            y=values,
            marker_color=[colors.get(lb) for lb in labels],
            name="speed-up",
            error_y=_error_bars(values, [(speedups[lb].low, speedups[lb].high) for lb in labels], FONT_COLOR),
            customdata=[[tps[lb].value if lb in tps else None, speedups[lb].n] for lb in labels],
            hovertemplate="%{x}: ×%{y:.2f}<br>%{customdata[0]:.1f} tokens/s, %{customdata[1]} run(s)<extra></extra>",
        )
    )
    fig.add_hline(y=1.0, line={"color": FONT_COLOR, "dash": "dot", "width": 1})
    fig.update_yaxes(title_text="× plain decoding's tokens/s", rangemode="tozero")
    runs = ", ".join(f"{plotly_text(label)} n={e.n}" for label, e in speedups.items())
    return style_figure(fig, title, height, f"mean ± std over runs; runs: {runs}", note)


def tokens_per_s_figure(
    runs: Runs, colors: Mapping[str, str] | None = None, height: int = 340, note: str = ""
) -> go.Figure:
    """Cumulative tokens/s against each run's own elapsed compute time (sum of its rounds' wall_ms)."""
    title = "Tokens/s over time"
    series = {
        label: metrics.tokens_per_s_series(ev) for label, ev in runs.items() if not isinstance(ev, AcceptanceStats)
    }  # a summary keeps no timeline
    series = {label: s for label, s in series.items() if s}
    if not series:
        return empty_figure("No rounds yet.", height, title)
    colors = run_colors(list(runs), known=colors)
    fig = go.Figure()
    for label, s in series.items():
        fig.add_trace(
            go.Scatter(
                x=[t for t, _ in s],
                y=[v for _, v in s],
                mode="lines",
                name=plotly_text(label),
                line={"color": colors.get(label), "width": 2.5},
                hovertemplate=f"{plotly_text(label)}<br>%{{x:.2f}} s: %{{y:.1f}} tokens/s<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="the run's own compute time (s)", rangemode="tozero")
    fig.update_yaxes(title_text="tokens/s so far", rangemode="tozero")
    sizes = ", ".join(f"{plotly_text(label)} n={len(runs[label])}" for label in series)
    return style_figure(fig, title, height, f"rounds (prefill included): {sizes}", note)
