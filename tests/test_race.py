"""The race in time (compare.Comparison.race): the next round goes to the lane that has spent the least of its own
time, a lane shows a round only once the race's clock reaches its end, speed-ups are frozen when a lane finishes,
and a replay plays on the same clock. Step (`step_round`) stays one round of every lane."""

from __future__ import annotations

import math

import pytest

from poss_core.rounds import metrics
from poss_core.rounds.events import DecodeSummary, DraftNode, RoundEvent
from poss_core.runtime import compare


def scripted(round_ms: float, per_round: int, rounds: int, prefill_ms: float = 5.0):
    """A decoder's generator with known costs: a prefill, then `rounds` rounds of `per_round` tokens each."""
    n = 1
    yield RoundEvent.target_only(0, 1, prefill_ms, n, tokens=[1], wall_ms=prefill_ms, prefill=True)
    for r in range(1, rounds + 1):
        n += per_round
        yield RoundEvent(
            round=r,
            nodes=[DraftNode(5, i - 1, i + 1, -0.1, 0.9, 0) for i in range(per_round - 1)],
            accepted=list(range(per_round - 1)),
            bonus=2,
            target_probs=[],
            feature_deviation=[],
            draft_ms=0.0,
            verify_ms=round_ms,
            new_tokens=n,
            tokens=[2] * per_round,
            wall_ms=round_ms,
        )
    yield DecodeSummary(text="", token_ids=[], stop_reason="eos", stats={})


class Plain(compare.Lane):
    def take(self, item) -> None:  # no tokenizer here: the rounds' texts are not needed
        if isinstance(item, RoundEvent):
            self.add(item, ["x"] * len(item.tokens), [], "x")
        else:
            super().take(item)


def race_of(lanes: dict[str, tuple[float, int, int]]) -> compare.Comparison:
    """A comparison of scripted lanes, by method: (ms a round, tokens a round, rounds)."""
    made = [Plain(name, name, source=scripted(*how)) for name, how in lanes.items()]
    return compare.Comparison(compare.RunSpec("hi", list(lanes), "tiny-random"), made)


# plain: 10 ms a token; eagle: 3 tokens in 20 ms (x1.5); poss2: 4 tokens in 32 ms (x1.25)
LANES = {"plain": (10.0, 1, 60), "eagle": (20.0, 3, 20), "poss2": (32.0, 4, 15)}


def test_every_lane_is_shown_at_the_same_time_and_counts_follow_the_speeds():
    comp = race_of(LANES)
    ratios = []
    while comp.race():
        clock = comp.race_ms
        for lane in comp.lanes:
            shown = metrics.wall_seconds(lane.events) * 1000
            assert shown <= clock + 1e-9  # nothing shown past the clock
            if not lane.finished:  # and each lane within one round of it
                assert shown > clock - LANES[lane.method][0] - 1e-9
        plain, eagle = comp.lane("plain"), comp.lane("eagle")
        if metrics.total_new_tokens(plain.events) > 20 and not eagle.finished:
            ratios.append(metrics.total_new_tokens(eagle.events) / metrics.total_new_tokens(plain.events))
    assert ratios and all(abs(r / 1.5 - 1) < 0.2 for r in ratios), ratios
    # Finished in the order of their speed-ups, each frozen at its finish
    assert [lane.method for lane in sorted(comp.lanes, key=lambda lane: metrics.wall_seconds(lane.events))] == [
        "eagle",
        "poss2",
        "plain",
    ]
    assert comp.speedup(comp.lane("eagle")) == pytest.approx(1.5, rel=0.03)
    assert comp.speedup(comp.lane("plain")) is None


def test_one_lane_decodes_at_a_time_the_one_that_spent_least():
    comp = race_of(LANES)
    while True:
        lane = comp.next_lane()
        if lane is None:
            break
        others = [o.spent_ms for o in comp.lanes if o.decoding and o is not lane]
        assert all(lane.spent_ms <= t for t in others)
        before = {o.method: o.spent_ms for o in comp.lanes}
        comp.race()
        changed = [o.method for o in comp.lanes if o.spent_ms != before[o.method]]
        assert changed in ([lane.method], [])  # only the chosen lane spent time (a summary costs none)


def test_a_speedup_shows_from_the_first_round_on_and_freezes_when_the_lane_finishes():
    comp = race_of(LANES)
    comp.race()  # plain's prefill only: no round past it yet anywhere
    assert comp.speedup(comp.lane("eagle")) is None
    while not comp.lane("eagle").finished:
        comp.race()
    frozen = comp.speedup(comp.lane("eagle"))
    assert frozen == comp.lane("eagle").speedup_at_end
    while comp.race():
        pass
    assert comp.speedup(comp.lane("eagle")) == frozen  # plain went on; eagle's figure stays as it finished


def test_a_replay_clock_shows_nothing_past_it():
    comp = race_of(LANES)
    for until in (0.0, 50.0, 123.0, 400.0):
        for _ in range(200):
            comp.race(until)
        assert comp.race_ms <= until
        for lane in comp.lanes:
            assert metrics.wall_seconds(lane.events) * 1000 <= until
            assert lane.spent_ms <= until + LANES[lane.method][0]  # decoded at most one round ahead
    while comp.race(math.inf):
        pass
    assert comp.finished and all(lane.stop_reason == "eos" for lane in comp.lanes)


def test_step_runs_one_round_of_every_lane():
    comp = race_of(LANES)
    comp.step_round()
    comp.step_round()
    assert [len(lane.events) for lane in comp.lanes] == [2, 2, 2] and comp.stepped
