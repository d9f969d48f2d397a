"""The figures' colours: one per specialist, one per run (its method's own, else the next Okabe-Ito colour, grey for
plain decoding), the target's own, and the text and grid greys that read on both Gradio themes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..runtime.methods import OKABE_ITO, PLAIN_COLOR

# Specialists (draft layer groups): one categorical colour each, the same as the token view (vermillion is kept
# for the target's own tokens and the accepted path).
SPECIALIST_COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#F0E442", "#8C6BB1", "#999999"]
TARGET_COLOR = "#D55E00"
# Mid-grey text and faint grids read on both the light and the dark Gradio theme (figures have no background).
FONT_COLOR = "#8a8f98"
GRID_COLOR = "rgba(128,128,128,0.22)"


def specialist_color(specialist: int) -> str:
    return SPECIALIST_COLORS[specialist % len(SPECIALIST_COLORS)]


def run_colors(
    labels: Sequence[str], plain: Sequence[str] = (), known: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A colour per run label: the `known` ones (the methods' own colours), then the next free Okabe-Ito colour in
    order; runs named in `plain` (no draft) get grey."""
    out, i = {}, 0
    for label in labels:
        if known and label in known:
            out[label] = known[label]
        elif label in plain:
            out[label] = PLAIN_COLOR
        else:
            out[label] = OKABE_ITO[i % (len(OKABE_ITO) - 1)]
            i += 1
    return out
