"""A round's fields are declared once, on RoundEvent: its JSON, the saved-run schema and the benchmark's records are
read off that declaration, so a field added there is written, checked and read back with no other edit."""

from __future__ import annotations

import json
from dataclasses import field, fields, make_dataclass

import pytest

from poss_core.base.json_safe import clean_json
from poss_core.results import records
from poss_core.rounds import events
from poss_core.rounds.events import DraftNode, FeatureDeviation, RoundEvent, StartDeviation, TreeDeviation
from poss_core.runtime import saved_runs


def full_round() -> RoundEvent:
    return RoundEvent(
        round=2,
        nodes=[DraftNode(5, -1, 1, -0.1, 0.9, 0), DraftNode(6, 0, 2, -0.5, 0.6, 1)],
        accepted=[0, 1],
        bonus=7,
        target_probs=[0.8, 0.5],
        feature_deviation=[FeatureDeviation(1.0, 0.1), FeatureDeviation(2.0, 0.2)],
        draft_ms=1.25,
        verify_ms=2.5,
        new_tokens=4,
        tokens=[5, 6, 7],
        text="abc",
        wall_ms=4.0,
        draft_ms_by_depth=[0.5, 1.25],
        bonus_prob=0.4,
        tree_deviation=[TreeDeviation(1, True, 1.0, 0.1), TreeDeviation(2, False, 3.0, 0.3, n=2)],
        continuation_deviation=[FeatureDeviation(1.5, 0.15)],
        every_position_deviation=[StartDeviation(1, 1.2, 0.12, n=3)],
    )


def test_every_field_round_trips_through_json_the_saved_run_schema_and_the_records():
    e = full_round()
    names = [f.name for f in fields(RoundEvent)]
    obj = json.loads(json.dumps(clean_json(e.to_json())))
    assert list(obj) == names and RoundEvent.from_json(obj) == e
    checked = saved_runs._Event.model_validate(obj)
    assert list(saved_runs._Event.model_fields) == names
    assert RoundEvent.from_json(checked.model_dump()) == e
    assert set(records.COLUMNS) | set(records.NOT_KEPT) == set(names)
    record = records.TurnRecord(0, "poss2", "d", 1, "c", 0, [5, 6, 7], "abc", "eos", 0.1, events=[e])
    back = records.TurnRecord.from_json(json.loads(json.dumps(record.to_json()))).events[0]
    for name in records.COLUMNS:
        assert getattr(back, name) == getattr(e, name), name


def test_a_round_without_its_later_fields_reads_their_defaults_and_round_and_bonus_are_required():
    old = {"round": 1, "bonus": 3}
    e = RoundEvent.from_json(old)
    assert e.nodes == [] and e.draft_ms == 0.0 and e.bonus_prob is None and e.draft_observed is True
    assert saved_runs._Event.model_validate(old).model_dump()["every_position_deviation"] == []
    with pytest.raises(KeyError, match="bonus"):
        RoundEvent.from_json({"round": 1})
    unobserved = events.from_json(DraftNode, [5, -1, 1, None, None, 0])  # null: not observed
    assert unobserved.score != unobserved.score and unobserved.draft_prob != unobserved.draft_prob


def test_a_new_field_is_written_read_and_bounded_with_no_other_edit():
    Later = make_dataclass("Later", [("marks", list[int], field(default_factory=list))], bases=(RoundEvent,))
    e = Later(**{**full_round().__dict__, "marks": [1, 2]})
    obj = events.to_json(e)
    assert obj["marks"] == [1, 2] and events.from_json(Later, obj) == e
    assert events.from_json(Later, {"round": 0, "bonus": 1}).marks == []
    model = saved_runs._saved_model(Later)
    assert model.model_validate(obj).marks == [1, 2]
    with pytest.raises(ValueError, match="marks"):  # held to the widest bounds a round has
        model.model_validate({**obj, "marks": list(range(saved_runs.MAX_NODES + 1))})
