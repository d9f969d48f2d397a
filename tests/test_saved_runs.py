"""Saved runs are checked against a schema with limits before a session changes: each case an attacker or a careless
user tried is refused with the line and field named, the tab keeps what it showed, and it still works afterwards."""

from __future__ import annotations

import json
import time

import pytest
from app_settings import req, run_settings
from helpers import PLOTLY_MARKUP, assert_shown_as_text, plotly_strings

from app.actions import handlers, saved_files
from app.page import serving, ui
from app.page import wiring as demo_wiring
from app.sessions import state, user_settings
from app.views import about
from poss_core.runtime import saved_runs

VIEW = user_settings.View()


def settings(**kw):
    return run_settings(**{**dict(methods=["plain", "poss2"], max_new_tokens=10), **kw})


@pytest.fixture(scope="module")
def good_lines(tmp_path_factory):
    r = req("saved-source")
    list(handlers.run_handler(settings(), VIEW, request=r))
    path = saved_runs.save_run(state.SESSIONS.get(r).comparison, tmp_path_factory.mktemp("runs") / "good.jsonl")
    return [json.loads(s) for s in path.read_text().splitlines()]


def write(tmp_path, lines, name="bad.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return str(path)


def first_event(lines, with_nodes=True):
    return next(
        i for i, line in enumerate(lines) if line["type"] == "event" and (line["event"]["nodes"] or not with_nodes)
    )


def deep_node(lines):
    i = first_event(lines)
    lines[i]["event"]["nodes"][0]["depth"] = 100_000
    return lines


def big_specialist(lines):
    i = first_event(lines)
    lines[i]["event"]["nodes"][0]["specialist"] = 1_000_000
    return lines


def setting(key, value):
    def change(lines):
        lines[0]["settings"][key] = value
        return lines

    return change


def head(key, value):
    def change(lines):
        lines[0][key] = value
        return lines

    return change


def event_line(key, value):
    def change(lines):
        lines[first_event(lines)][key] = value
        return lines

    return change


CASES = [
    ("a node at depth 100,000", deep_node, "line", "event.nodes.0.depth"),
    ("settings.depth = 1e6", setting("depth", 1e6), "line 1", "settings.depth"),
    ("settings.depth = 'deep'", setting("depth", "deep"), "line 1", "settings.depth"),
    ("specialist = 1e6", big_specialist, "line", "event.nodes.0.specialist"),
    ("hardware = 'abc'", head("hardware", "abc"), "line 1", "hardware"),
    ("prompt_tokens = 'x'", head("prompt_tokens", "x"), "line 1", "prompt_tokens"),
    ("pieces = [{}]", event_line("pieces", [{}]), "line", "pieces.0"),
    ("lane = -1", event_line("lane", -1), "line", "lane"),
    ("lane = 7", event_line("lane", 7), "line", "lane"),
    (
        "a lane label with HTML",
        lambda ls: head("lanes", [{**ls[0]["lanes"][0], "label": "<img src=x>"}] + ls[0]["lanes"][1:])(ls),
        "line 1",
        "lanes.0.label",
    ),
    ("seed = 1e30", setting("seed", 1e30), "line 1", "settings.seed"),
    ("four lanes", lambda ls: head("lanes", ls[0]["lanes"] * 2)(ls), "line 1", "lanes"),
    ("a huge prompt", setting("prompt", "x" * 10**6), "line 1", "settings.prompt"),
    (
        "a parent after its child",
        lambda ls: (ls[first_event(ls)]["event"]["nodes"][0].update(parent=3), ls)[1],
        "line",
        "nodes.0.parent",
    ),
]


@pytest.mark.parametrize("what,change,where,field", CASES, ids=[c[0] for c in CASES])
def test_a_bad_saved_run_changes_nothing_and_names_the_field(what, change, where, field, good_lines, tmp_path):
    r = req("saved-bad")
    good = write(tmp_path, good_lines, "good.jsonl")
    out = saved_files.load_handler(good, VIEW, request=r)
    assert "Loaded a saved run" in out["status"]
    session = state.SESSIONS.get(r)
    shown = session.comparison
    start = time.monotonic()
    out = saved_files.load_handler(write(tmp_path, change(json.loads(json.dumps(good_lines)))), VIEW, request=r)
    assert time.monotonic() - start < 5.0
    assert "poss-status error" in out["status"] and where in out["status"] and field in out["status"], out["status"]
    assert session.comparison is shown and session.loaded is shown  # the tab keeps what it showed
    assert not session.lock.locked()
    if what == CASES[0][0]:  # and still replays (the same path for every case: once keeps the tier quick)
        frames = list(handlers.replay_handler(VIEW, request=r))
        assert "Replay finished" in frames[-1]["status"]


@pytest.mark.parametrize(
    "first,needle",
    [
        ("[1,2,3]", "is not a saved run"),
        ("5", "is not a saved run"),
        ("{not json", "line 1 is not JSON"),
        ('"run"', "is not a saved run"),
        ("[" * 100_000, "line 1 is not JSON"),
    ],
)
def test_a_first_line_that_is_not_a_run_object(first, needle, good_lines, tmp_path):
    r = req("saved-first")
    saved_files.load_handler(write(tmp_path, good_lines, "good.jsonl"), VIEW, request=r)
    shown = state.SESSIONS.get(r).comparison
    out = saved_files.load_handler(write(tmp_path, [first] + good_lines[1:]), VIEW, request=r)
    assert needle in out["status"] and state.SESSIONS.get(r).comparison is shown
    out = list(handlers.run_handler(settings(max_new_tokens=4), VIEW, request=r))[-1]
    assert "Done" in out["status"]


def test_size_and_line_limits(good_lines, tmp_path, monkeypatch):
    path = write(tmp_path, good_lines)
    monkeypatch.setattr(saved_runs, "MAX_RUN_BYTES", 100)
    with pytest.raises(saved_runs.RunFileError, match="a saved run may be at most"):
        saved_runs.load_run(path)
    monkeypatch.undo()
    i = first_event(good_lines, with_nodes=False)
    many = good_lines + [good_lines[i]] * (saved_runs.MAX_ROUNDS + 1)
    with pytest.raises(saved_runs.RunFileError, match=f"more than {saved_runs.MAX_ROUNDS} rounds"):
        saved_runs.load_run(write(tmp_path, many, "many.jsonl"))
    # The good run still loads, every lane as it was.
    back = saved_runs.load_run(path)
    assert [len(lane.events) for lane in back.lanes] == [
        sum(1 for line in good_lines if line["type"] == "event" and line["lane"] == k) for k in range(2)
    ]


def test_the_upload_is_limited_in_size_and_in_concurrency():
    assert serving.launch_kwargs()["max_file_size"] == saved_runs.MAX_RUN_BYTES
    demo = ui.build_demo("tiny-random")
    load = next(fn for fn in demo.fns.values() if fn.api_name == "load_run")
    assert load.concurrency_limit == demo_wiring.LOAD_CONCURRENCY and load.concurrency_id == "load"


@pytest.mark.parametrize(
    "evil",
    [
        "[x](javascript:alert(1))",
        "![img](http://evil.example/x.png)",
        "<img src=x onerror=alert(1)>",
        "www.evil.example",
        "a | b\n| c |",
        "<http://evil.example>",
    ],
)
def test_markdown_built_from_a_loaded_run_is_neutralised(evil, good_lines, tmp_path):
    lines = json.loads(json.dumps(good_lines))
    lines[0]["hardware"] = {"device": evil, "link](http://x": "y"}
    r = req("saved-md")
    out = saved_files.load_handler(write(tmp_path, lines), VIEW, request=r)
    md = out["hardware"]
    rows = md.split("|---|---|\n", 1)[1]
    for bad in ("[", "]", "(", ")", "<", ">", "!", "javascript:", "http:", "www.", "\n|"):
        assert bad not in rows.replace("\n| ", ""), (bad, rows)
    assert about.plain_markdown("abc 12") == "abc 12"


def test_a_saved_run_keeps_each_rounds_tree_and_continuation_deviation(good_lines, tmp_path):
    i = first_event(good_lines)
    event = good_lines[i]["event"]
    assert event["tree_deviation"] and event["continuation_deviation"]
    comp = saved_runs.load_run(write(tmp_path, good_lines, "good.jsonl"))
    lane = next(lane for lane in comp.lanes if lane.method == "poss2")
    first = next(e for e in lane.events if e.nodes)
    assert [d.k for d in first.tree_deviation if d.on_path][0] == 1
    assert len(first.continuation_deviation) == len(event["continuation_deviation"])
    bad = json.loads(json.dumps(good_lines))
    bad[i]["event"]["tree_deviation"][0]["k"] = 99
    with pytest.raises(saved_runs.RunFileError, match="tree_deviation"):
        saved_runs.load_run(write(tmp_path, bad))


def test_token_texts_and_labels_of_a_loaded_run_show_as_text_in_trees_and_charts(good_lines, tmp_path):
    lines = json.loads(json.dumps(good_lines))
    for line in lines:  # (lane labels are refused with `<` or `>` by the schema)
        if line["type"] == "event":
            line["node_texts"] = [PLOTLY_MARKUP] * len(line["node_texts"])
            line["pieces"] = [PLOTLY_MARKUP[:60]] * len(line["pieces"])
    r = req("saved-plotly")
    out = saved_files.load_handler(write(tmp_path, lines), VIEW, request=r)
    assert state.SESSIONS.get(r).comparison.lanes[1].node_texts[-1][0] == PLOTLY_MARKUP  # loaded as it was
    assert_shown_as_text(out["lane1_tree"])
    for chart in ("pos_acc", "feature_deviation", "accept_hist", "tokens_per_s"):
        strings = plotly_strings(out[chart])
        assert not any("<a " in s or "<span" in s for s in strings), chart
