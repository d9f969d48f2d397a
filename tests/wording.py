"""Every user-facing message the app's tests rely on, named once: a key phrase per message (or a predicate for a
message that carries values), so that rewording a sentence in the UI is fixed here and nowhere else. Where the app
holds the sentence as a constant or builds it in a function, the phrase comes from there.

Tests check values and structure directly (tests/page.py reads the page's structure); they come here only to check
that the user is told something: an actionable error, a place in line, what a replay is."""

from __future__ import annotations

import html
import re
from typing import Any

from page import ICONS, Badge, Status, status

from app.actions import handlers
from app.views import render


def text(said: Any) -> str:
    """The words of a message: a status line (a handler's frame, its dict, the status HTML, a Status or a
    (message, kind) pair), a badge, a figure's title and annotations, or any other text (unescaped)."""
    if isinstance(said, (Status, Badge)):
        return said.text
    if isinstance(said, tuple):
        return said[0]
    if isinstance(said, (list, dict)) or (isinstance(said, str) and said.startswith('<div class="poss-status ')):
        return status(said).text
    layout = getattr(said, "layout", None)
    if layout is not None:
        title = layout.title.text or ""
        return title + "\n" + "\n".join(unwrapped(a.text) for a in layout.annotations)
    words = html.unescape(str(said))
    for icon in ICONS.values():  # a status line as a browser shows it: its icon first
        words = words.removeprefix(icon)
    return words


def says(said: Any, *phrases: str) -> bool:
    """Whether the message holds every phrase (each a constant below)."""
    words = text(said)
    return all(p in words for p in phrases)


# ---------------------------------------------------------------- the status line: how a call ended

DONE = handlers.DONE + ":"  # a run finished: new tokens per lane
REPLAY_DONE = handlers.REPLAY_DONE + ":"
STOPPED = "every lane was cancelled cleanly"
STOPPING = "Stopping"
LOADING = "Loading"
LOADED = "Loaded a saved run"
TAB_BUSY = handlers.TAB_BUSY  # a Run or Step while the tab runs
NEEDS_GPU = "needs a GPU"
BAD_RUN_FILE = "could not read the saved run"
FITTING = "Fitting the tree budget of"
DEFAULT_BUDGET = "starts on the default tree budget"
FITS_AT_START_ONLY = "only at start-up"
RUN_LIVE = "Run to run this prompt live"  # an example's replay ends by pointing at ▶ Run
QUEUE_STOPPED = "Stopped while waiting in the queue"
RUN_CLEARED = "cleared to free memory"
FORGOT = "Forgot"


def says_done(said: Any) -> bool:
    return text(said).startswith(DONE)


def says_replay_done(said: Any) -> bool:
    return text(said).startswith(REPLAY_DONE)


def says_stopped(said: Any) -> bool:
    return text(said).startswith("Stopped") and STOPPED in text(said)


RUNNING = "Running: round"  # a live run's streaming status: "Running: round N…"


def says_running(said: Any) -> bool:
    return re.match(RUNNING + r" \d+", text(said)) is not None


def says_stepped(said: Any, round_: int) -> bool:
    """Step mode: round `round_` (0: the prefill) done in every lane."""
    words = text(said)
    return "Step mode" in words and ("prefill" in words if round_ == 0 else f"round {round_} done" in words)


def says_crashed(said: Any, error: str, message: str) -> bool:
    """An unexpected error, contained: one line naming its type and message, the app still running."""
    return says(said, "Something went wrong", f"({error}: {message})")


def says_call_limit(said: Any, seconds: float, doing: str = "") -> bool:
    """The server's time cap per call stopped it (while `doing`, when said)."""
    return says(said, f"limit of {seconds:g} s per call" + (" while" if doing else ""), doing)


def says_stopped_preparing(said: Any, label: str) -> bool:
    return says(said, f"Stopped while preparing the {label}")


def says_memory_freed(said: Any, why: str = "") -> bool:
    """A paused Step session was ended and its decoders freed (said once), and why."""
    return re.search(r"memory (was )?freed because", text(said)) is not None and why in text(said)


def idle_for(minutes: float) -> str:
    """How state.SessionStore.reap names the idle time that released a tab's work."""
    return f"more than {minutes:g} minute{'s' if minutes != 1 else ''}"


def says_replaying_recording(said: Any, preset: str, hardware: str) -> bool:
    """An example's replay says it is a recording, of which preset, and on what hardware."""
    return says(said, f"Replaying a recording of {preset}, made on {hardware}")


def says_forgot(said: Any, rounds: int) -> bool:
    return says(said, f"{FORGOT} {rounds} pooled round")


# ---------------------------------------------------------------- refused inputs (each names the bad value)


def run_too_big(mb: int) -> str:
    """A saved run refused for what it would take once decompressed."""
    return f"more than {mb} MB once decompressed"


PROMPT_EMPTY = "the prompt is empty"
NO_METHOD = "no method chosen"


def too_many_lanes(most: int) -> str:
    return f"at most {most} lanes"


def out_of_range(field: str, value: Any) -> str:
    return f"{field}={value!r} is out of range"


def not_one_of(field: str, value: Any, *valid: str) -> str:
    return f"{field}={value!r}: use one of {', '.join(valid)}"


def method_unavailable(method: str) -> str:
    return f"method {method!r} is not available"


def over_context(window: int) -> str:
    return f"context window is {window}"


def over_token_limit(asked: int, limit: int) -> str:
    return f"max_new_tokens={asked} is more than this server gives one run ({limit}"


# ---------------------------------------------------------------- the queue and each client's share


def says_queued(
    said: Any, place: int, running: int | None = None, slots: int | None = None, waiting: int | None = None
) -> bool:
    """A waiting run's status: its place in line, the queue (when given), and an estimate of the wait."""
    nth = {1: "1st", 2: "2nd", 3: "3rd"}.get(place, f"{place}th")
    words = text(said)
    queue = (
        f"{running} of {slots} slot{'s' if slots != 1 else ''} decoding, {waiting} waiting"
        if running is not None
        else ""
    )
    return f"{nth} in line" in words and queue in words and re.search(r"about \d+ s to go", words) is not None


def queue_full(waiting: int) -> str:
    """A live run refused because the line is full."""
    return f"{waiting} live runs are already waiting"


def estimate_basis(runs: int) -> str:
    """What a queue estimate rests on once live runs have finished."""
    return f"at the speed of the last {runs} live run{'s' if runs != 1 else ''}"


def says_share_used(said: Any, calls: int, by_address: bool = False) -> bool:
    """A client (a tab, or with `by_address` an address) is refused: it already has its share of calls."""
    return says(
        said,
        f"already has {calls} call{'s' if calls != 1 else ''} waiting or running",
        "your address" if by_address else "",
    )


# ---------------------------------------------------------------- the class pool

RESET_REFUSED = "not this server's reset key"
RESET_DONE = "was reset"


def class_pool_title(preset: str) -> str:
    """The "everyone on this server" charts' subtitle opening."""
    return f"Everyone on this server ({preset})"


# ---------------------------------------------------------------- lane headers


def says_identical(badge: Any) -> bool:
    return text(badge).startswith("✓ identical to plain decoding")


def says_identical_in_full(badge: Any) -> bool:
    """A finished lane's badge: identical to plain decoding, token for token (a student's words)."""
    return text(badge) == "✓ identical to plain decoding, token for token"


def says_differs(
    badge: Any, at: int, margin: float | None = None, tolerance: float | None = None, near_tie: bool = False
) -> bool:
    """The identity badge's first difference at token `at`, in words ("differs from token 12: ..."): a near-tie or a
    real difference; its tooltip gives plain's logit margin against the precision's tolerance (`margin` None: not
    measured)."""
    words = text(badge)
    head = f"differs from token {at}: "
    detail = badge.title if isinstance(badge, Badge) else ""
    if margin is None:
        measured = "margin there was not measured" in detail
    else:
        measured = f"margin there: {margin:.2g}" in detail and (
            tolerance is None or f"tolerance {tolerance:g}" in detail
        )
    if near_tie:
        return words.startswith("≈ " + head) and "almost equal" in words and measured
    return words.startswith("✗ " + head) and "not a rounding tie" in words and measured


def says_cut_off(head: str, limit: int) -> bool:
    """A lane header's state: the answer was cut at the length limit, said in words (and where to change it)."""
    return render.stop_words("max_new_tokens", limit) in text(head) and "Max new tokens" in text(head)


def says_near_tie(badge: Any) -> bool:
    return "near-tie" in text(badge) and text(badge).startswith("≈")


def says_sampling(badge: Any) -> bool:
    return text(badge).startswith("sampling")


def says_untrained_drafts(note: str) -> bool:
    """The preset note names drafts that are untrained stand-ins."""
    return "untrained" in note


# ---------------------------------------------------------------- token tooltips, trees, charts

UNOBSERVABLE = "not observable"  # what transformers' generate does not show: candidates' probabilities, rejections


def says_accepted_draft(tooltip: str, round_: int) -> bool:
    return tooltip.startswith(f"round {round_} · accepted draft token")


def says_probs(tooltip: str, draft: float, target: float) -> bool:
    from poss_core.rounds.explain import say_probability

    return f"draft p {say_probability(draft)} · target p {say_probability(target)}" in tooltip


def tree_title(fig: Any) -> tuple[str, int]:
    """A lane's tree figure (or its title as a page shows it): (the lane's short name, the round shown)."""
    title = fig if isinstance(fig, str) else fig.layout.title.text
    m = re.search(r"(\S.*): draft tree, round (\d+)", title)
    assert m, title
    return m.group(1), int(m.group(2))


def tree_round(fig: Any) -> int:
    return tree_title(fig)[1]


def unwrapped(text: str | None) -> str:
    """A blank figure's message as one line (figures.empty_figure wraps it for a phone's width)."""
    return (text or "").replace("<br>", " ")


def says_prefill_tree(fig: Any) -> bool:
    return "Prefill" in unwrapped(fig.layout.annotations[0].text)


def says_plain_tree(fig: Any) -> bool:
    return "Plain decoding" in unwrapped(fig.layout.annotations[0].text)


def says_no_draft_rounds(fig: Any) -> bool:
    return "No draft rounds" in unwrapped(fig.layout.annotations[0].text)


def chart_n(fig: Any) -> dict[str, int]:
    """A chart's sample sizes as its subtitle gives them: {"EAGLE": 3, ...} from "EAGLE n=3, ..."."""
    return {label.strip(): int(n) for label, n in re.findall(r"([^,:;\n<>]+?) n=(\d+)", fig.layout.title.text)}


def n_of(fig: Any, label: str) -> int:
    """The sample size a chart states for `label`."""
    found = chart_n(fig)
    assert label in found, fig.layout.title.text
    return found[label]


def pooled_speeds(fig: Any) -> dict[str, tuple[int, int]]:
    """The class pool's tokens/s panel: {label: (tokens, runs)} from "EAGLE 12.3 (1,234 tokens, 5 runs)"."""
    said = unwrapped(fig.layout.annotations[0].text) if fig.layout.annotations else ""
    return {
        label.strip(): (int(tokens.replace(",", "")), int(runs))
        for label, tokens, runs in re.findall(r"([^:·]+?) [\d.]+ \(([\d,]+) tokens, (\d+) runs\)", said)
    }


POS_ACC_TITLE = "Position-wise acceptance"  # the pos-acc chart's title
POOLED = "All my runs"  # the pooled charts' subtitle opening


def pooled(runs: int) -> str:
    """How the pooled charts say how many runs they pool."""
    return f"{POOLED}: {runs} run{'s' if runs != 1 else ''} pooled"


def says_pooled(title: str) -> bool:
    """Whether a chart's title says it pools runs ("All my runs", or everyone's)."""
    return "pooled" in title or POOLED in title


def pool_note(fig: Any) -> str:
    """The pooled charts' second subtitle line (chart_view.pool_note's words; "" when the chart is not pooled)."""
    title = fig.layout.title.text or ""
    m = re.search(POOLED + r": [^<\n]*", title)
    return m.group(0) if m else ""


def pooled_runs(fig: Any) -> int | None:
    """How many runs "All my runs" pooled, as the chart says (None: not pooled, or per method)."""
    m = re.search(POOLED + r": (\d+) runs? pooled", fig.layout.title.text or "")
    return int(m.group(1)) if m else None


def says_settings_varied(fig: Any, *names: str) -> bool:
    return f"settings varied across runs ({', '.join(names)})" in text(fig) if names else "settings varied" in text(fig)


def says_capped(fig: Any, rounds: int) -> bool:
    return f"capped: the latest {rounds:,} rounds per method" in text(fig)


# ---------------------------------------------------------------- a round told in words (poss_core/rounds/explain.py)


def proposed(round_: int, candidates: int | None = None) -> str:
    """How a drafting round's account opens: the round and how many candidates the draft proposed."""
    return f"Round {round_}: the draft proposed" + (f" {candidates} candidate tokens" if candidates else "")


def says_proposed(account: str, round_: int, candidates: int | None = None) -> bool:
    return proposed(round_, candidates) in html.unescape(account)


def says_kept(account: str, n: int, first: str, target_p: float) -> bool:
    """It kept `n` drafted tokens, in order, the first `first` with its target probability."""
    return f'It kept {n} drafted tokens, in order: "{first}" (target p {target_p:.2f})' in html.unescape(account)


def says_top_candidate(account: str, token: str, draft_p: float) -> bool:
    return f'top candidate "{token}" (draft p {draft_p:.2f})' in html.unescape(account)


def says_sampling_draw(account: str) -> bool:
    return "accept/reject draw" in account


TIME_SPLIT = "Time: draft"  # an account's time split (draft, verify)


def says_one_forward_pass(account: str) -> bool:
    return "one forward pass" in account


def says_prefill_round(account: str) -> bool:
    return "Round 0 (prefill)" in account


def says_plain_round(account: str) -> bool:
    return "(plain decoding)" in account


def conversation_empty() -> str:
    """The conversation panel of a tab with no conversation (a new one, or single turn)."""
    return render.conversation_html([])
