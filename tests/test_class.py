"""A class on one server: examples replay their recordings at once (no model, no live slot), live runs wait their
turn in one line with their place and an estimate shown, and "everyone on this server" pools every finished live
run's numbers per preset and method, resettable only with the launch key. Tiny-random preset, through the handlers."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import page
import pytest
import wording
from app_settings import req, run_settings
from wording import n_of

from app.actions import api, calls, handlers, view_handlers
from app.page import launch, server_state
from app.server import limits, live_queue
from app.server.class_pool import CLASS, ClassPool
from app.sessions import recordings, state, user_settings
from app.views import control_defaults
from app.views.chart_view import CHART_NAMES
from poss_core.base.errors import ConfigError
from poss_core.models.presets import DEFAULT_PRESET
from poss_core.rounds import metrics
from poss_core.runtime import compare, saved_runs

THIS_RUN = user_settings.View()
EVERYONE = user_settings.View.from_controls("draft position", False, "conditional", user_settings.CLASS_VIEW)
THREE = ["plain", "eagle", "poss2"]
KEY = "teacher-key"


def live_run(request, **kw) -> compare.Comparison:
    frames = list(handlers.run_handler(run_settings(**kw), THIS_RUN, request=request))
    assert wording.says_done(frames[-1]), page.status(frames[-1])
    return state.SESSIONS.get(request).comparison


@pytest.fixture
def empty_class(monkeypatch):
    """The server's class pool, emptied with the launch key; the app serves tiny-random."""
    monkeypatch.setattr(CLASS, "reset_key", KEY)
    monkeypatch.setattr(state, "APP_PRESET", "tiny-random")
    assert CLASS.reset(KEY)[0]
    return CLASS


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A folder of recordings as scripts/record_examples.py writes them (tiny-random, 8 tokens, examples 1 and 2)."""
    folder = tmp_path_factory.mktemp("recordings")
    for i in (0, 1):
        spec = compare.RunSpec(
            recordings.EXAMPLES[i]["prompt"], THREE, "tiny-random", depth=4, top_k=4, tree_budget=16, max_new_tokens=8
        )
        comp = compare.run_to_end(compare.start(spec.resolve()))
        comp.hardware = {**comp.hardware, "cpu": "Test CPU, 1 thread(s)", "note": "a test machine"}
        saved_runs.save_run(comp, recordings.recording_path(i, "tiny-random", folder), compact=True)
    return folder


# ---------------------------------------------------------------- everyone on this server


def test_everyone_pools_every_tabs_finished_runs_numbers_only(empty_class):
    a, b = req("class-a"), req("class-b")
    runs = [
        live_run(a, prompt="secret prompt alpha", methods=THREE, max_new_tokens=7),
        live_run(b, prompt="secret prompt beta", methods=THREE, max_new_tokens=9),
    ]
    entries = CLASS.view("tiny-random")
    assert {m: e.runs for m, e in entries.items()} == {"plain": 2, "eagle": 2, "poss2": 2}
    for m, label in (("eagle", "EAGLE"), ("poss2", "POSS-2")):
        events = [e for c in runs for lane in c.lanes if lane.method == m for e in lane.events]
        assert entries[m].stats.hist == metrics.accept_hist(events, 4)  # adds up exactly like one run
        assert entries[m].tokens == sum(
            metrics.total_new_tokens(lane.events) for c in runs for lane in c.lanes if lane.method == m
        )
    # A third tab that ran nothing sees both tabs' rounds, with the sample size on each chart.
    out = view_handlers.view_handler(EVERYONE, request=req("class-teacher"))
    draft_rounds = sum(
        len(metrics.draft_rounds(lane.events)) for c in runs for lane in c.lanes if lane.short == "EAGLE"
    )
    assert n_of(out["pos_acc"], "EAGLE") == draft_rounds == n_of(out["accept_hist"], "EAGLE")
    assert wording.says(out["pos_acc"], wording.class_pool_title("tiny-random"))
    speeds = wording.pooled_speeds(out["tokens_per_s"])
    assert speeds == {e.label: (e.tokens, e.runs) for e in entries.values()} and speeds["Plain"][1] == 2
    shown = str([f.to_plotly_json() for f in (out["pos_acc"], out["feature_deviation"], out["accept_hist"])])
    assert "secret prompt" not in shown and "secret prompt" not in repr(entries)  # numbers only


def test_replays_loaded_runs_and_unfinished_steps_stay_out_until_they_end(empty_class, recorded, monkeypatch):
    monkeypatch.setattr(recordings, "RECORDINGS_DIR", recorded)
    r = req("class-replays")
    list(handlers.example_handler(recordings.EXAMPLES[0]["prompt"], "tiny-random", THIS_RUN, request=r))
    list(handlers.replay_handler(THIS_RUN, request=r))
    handlers.step_handler(run_settings(max_new_tokens=30), THIS_RUN, request=r)  # steps through the recording
    assert len(CLASS) == 0 and CLASS.version == empty_class.version
    stepper = req("class-steps")
    for _ in range(2):
        handlers.step_handler(run_settings(max_new_tokens=30), THIS_RUN, request=stepper)
    assert len(CLASS) == 0  # paused: not finished
    handlers.stop_handler(THIS_RUN, request=stepper)
    assert CLASS.view("tiny-random")["eagle"].runs == 1  # a stopped run's rounds go in once


def test_the_class_charts_redraw_only_when_the_pool_changed(empty_class):
    teacher = req("class-tick")
    first = view_handlers.class_tick_handler(EVERYONE, request=teacher)
    assert set(first) == set(CHART_NAMES)  # drawn
    assert view_handlers.class_tick_handler(EVERYONE, request=teacher) == {}  # unchanged: nothing is sent
    assert view_handlers.class_tick_handler(THIS_RUN, request=teacher) == {}
    live_run(req("class-tick-student"), methods=["plain", "eagle"], max_new_tokens=5)
    again = view_handlers.class_tick_handler(EVERYONE, request=teacher)
    assert n_of(again["pos_acc"], "EAGLE") >= 1


def test_only_the_launch_key_resets_the_class_pool(empty_class):
    live_run(req("class-reset"), methods=["plain", "eagle"], max_new_tokens=5)
    r = req("class-reset-ui")
    out = view_handlers.class_reset_handler("not the key", THIS_RUN, request=r)
    refused = page.status(out)
    assert (
        out["class_key"] == ""
        and refused.kind == "error"
        and wording.says(refused, wording.RESET_REFUSED)
        and len(CLASS) == 2
    )
    out = view_handlers.class_reset_handler(KEY, THIS_RUN, request=r)
    assert page.status(out).kind == "info" and wording.says(out["status"], wording.RESET_DONE) and len(CLASS) == 0
    no_key = ClassPool()
    assert no_key.reset("") == no_key.reset(KEY) and not no_key.reset(KEY)[0]


def test_the_class_pool_is_bounded_whatever_the_number_of_runs():
    pool = ClassPool(max_keys=2)
    comp = compare.run_to_end(
        compare.start(
            compare.RunSpec("Hi", THREE, "tiny-random", depth=4, top_k=4, tree_budget=16, max_new_tokens=6).resolve()
        )
    )
    for _ in range(5):
        pool.add_run(comp)
    assert len(pool) == 2 and pool.view("tiny-random")["plain"].runs == 5  # the third method is past the cap
    assert len(pool.view("tiny-random")["eagle"].stats.hist) == 5  # depth 4: a fixed-size table, not the rounds


# ---------------------------------------------------------------- examples replay at once


def test_an_example_replays_its_recording_without_a_model_or_a_live_slot(recorded, monkeypatch):
    monkeypatch.setattr(recordings, "RECORDINGS_DIR", recorded)
    monkeypatch.setattr(recordings, "DEFAULT_PRESET", "tiny-random")  # none made on smollm2 here: the fallback
    monkeypatch.setattr(compare.MODELS, "target", lambda *a, **k: pytest.fail("a replay must not load a model"))
    monkeypatch.setattr(live_queue, "LIVE", live_queue.LiveQueue(slots=1))
    busy = live_queue.LIVE.join()
    assert live_queue.LIVE.try_start(busy)  # every live slot is taken
    r = req("class-example")
    t0 = time.monotonic()
    frames = handlers.example_handler(recordings.EXAMPLES[1]["prompt"], DEFAULT_PRESET, THIS_RUN, request=r)
    first = next(frames)
    assert time.monotonic() - t0 < 5.0
    assert wording.says_replaying_recording(first, "tiny-random", "Test CPU")
    assert "a test machine" in page.status(first).text  # the recording's own hardware note
    assert page.badges(first["lane1_head"])["replay"].kind == "neutral"
    last = list(frames)[-1]
    assert wording.says_replay_done(last) and wording.says(last, wording.RUN_LIVE)
    session = state.SESSIONS.get(r)
    assert session.loaded is not None and session.comparison.replay and session.pools == {}
    assert not session.lock.locked()
    out = next(handlers.example_handler("a prompt of my own", "tiny-random", THIS_RUN, request=r))
    assert page.status(out).kind == "info" and wording.says(out, wording.RUN_LIVE)
    live_queue.LIVE.leave(busy)


def test_a_replay_keeps_its_recorded_timing(recorded, monkeypatch):
    """A replay plays on the race's clock at its recorded speed: it lasts as long as its slowest lane's own time."""
    monkeypatch.setattr(recordings, "RECORDINGS_DIR", recorded)
    rec = recordings.recording_for(0, "tiny-random")
    for lane in rec.lanes:  # make the recorded compute long enough to measure: 40 ms a round
        lane.events[:] = [e.__class__(**{**e.__dict__, "wall_ms": 40.0}) for e in lane.events]
    monkeypatch.setattr(recordings, "_LOADED", {recordings.recording_path(0, "tiny-random", recorded): rec})
    t0 = time.monotonic()
    list(handlers.example_handler(recordings.EXAMPLES[0]["prompt"], "tiny-random", THIS_RUN, request=req("pace")))
    took = time.monotonic() - t0
    slowest = max(40.0 * len(lane.events) for lane in rec.lanes) / 1000
    assert 0.9 * slowest <= took <= slowest + 2.0, (took, slowest)


def test_the_example_index_and_the_fallback_to_the_default_presets_recording(recorded, monkeypatch):
    assert recordings.example_index("  " + recordings.EXAMPLES[2]["prompt"] + "\n") == 2
    assert recordings.example_index("something else") is None
    monkeypatch.setattr(recordings, "DEFAULT_PRESET", "tiny-random")
    assert recordings.recording_for(1, "no-such-preset", recorded).spec.preset == "tiny-random"
    assert recordings.recording_for(4, "tiny-random", recorded) is None


# ---------------------------------------------------------------- honest queueing


def test_the_live_queue_is_first_come_first_served_with_places_and_estimates():
    q = live_queue.LiveQueue(slots=1, max_waiting=3, typical_s_per_unit=0.5)
    a, b, c = q.join(work=20), q.join(work=10), q.join(work=40)
    assert q.try_start(a) and not q.try_start(b) and not q.try_start(c)  # one slot, a has it
    assert q.place(a) == 0 and q.place(b) == 1 and q.place(c) == 2
    # a holds its slot about 20 x 0.5 s; b then holds it 10 x 0.5 s: the estimates add up in line.
    assert 9.0 < q.estimate_s(b) <= 10.0 and q.estimate_s(c) == pytest.approx(q.estimate_s(b) + 5.0, abs=0.2)
    assert wording.says_queued(q.status(c), place=2, running=1, slots=1, waiting=2)
    d = q.join()
    with pytest.raises(live_queue.QueueFull) as full:
        q.join()
    assert wording.says(str(full.value), wording.queue_full(3))
    q.leave(d)
    assert not q.try_start(c)  # b came first
    q.leave(a)
    assert q.try_start(b) and q.rate() < 0.05  # a held its slot a moment for 20 units: the estimates follow
    assert q.estimate_s(c) < 0.5 and wording.says(q.status(c), wording.estimate_basis(1))
    q.leave(c)  # gave up waiting
    assert q.counts() == (1, 0)


def test_a_waiting_run_shows_its_place_and_stop_leaves_the_line(monkeypatch):
    monkeypatch.setattr(live_queue, "LIVE", live_queue.LiveQueue(slots=1))
    monkeypatch.setattr(calls, "QUEUE_FRAME_S", 0.0)
    busy = live_queue.LIVE.join()
    assert live_queue.LIVE.try_start(busy)
    r = req("class-wait")
    gen = handlers.run_handler(run_settings(), THIS_RUN, request=r)
    status = page.status(next(gen))
    assert status.kind == "busy" and wording.says_queued(status, place=1, running=1, slots=1, waiting=1)
    assert live_queue.LIVE.counts() == (1, 1)
    handlers.stop_handler(THIS_RUN, request=r)
    out = list(gen)[-1]
    assert wording.says(out, wording.QUEUE_STOPPED)
    assert live_queue.LIVE.counts() == (1, 0) and not state.SESSIONS.get(r).lock.locked()
    # Once the slot is free the next run goes straight through.
    live_queue.LIVE.leave(busy)
    live_run(r, max_new_tokens=4)
    assert live_queue.LIVE.counts() == (0, 0)


def test_a_waiting_run_starts_when_the_slot_frees_and_its_cap_starts_then(monkeypatch):
    monkeypatch.setattr(live_queue, "LIVE", live_queue.LiveQueue(slots=1))
    # A cap shorter than the wait: waiting in line is not decoding.
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, call_s=1.5))
    busy = live_queue.LIVE.join()
    live_queue.LIVE.try_start(busy)
    threading.Timer(2.0, live_queue.LIVE.leave, args=(busy,)).start()
    frames = list(handlers.run_handler(run_settings(max_new_tokens=4), THIS_RUN, request=req("class-turn")))
    assert any(wording.says_queued(f, place=1) for f in frames) and wording.says_done(frames[-1])


def test_the_servers_token_limit_is_checked_before_queueing(monkeypatch):
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, max_new_tokens=16))
    out = list(handlers.run_handler(run_settings(max_new_tokens=17), THIS_RUN, request=req("class-limit")))[-1]
    assert page.status(out).kind == "error" and wording.says(out, wording.over_token_limit(17, 16))
    import gradio as gr

    with pytest.raises(gr.Error) as refused:
        api.api_run("Hi", ["plain"], "tiny-random", max_new_tokens=17, quiet_refusals=True)
    assert isinstance(refused.value.__cause__, ConfigError)
    assert wording.says(refused.value.message, wording.over_token_limit(17, 16))


def test_launch_defaults_for_a_two_vcpu_space():
    assert live_queue.auto_slots(2, 1) == 1  # a 2-vCPU Space: one live run on one core, one core for the server
    assert live_queue.auto_slots(16, 2) == 4 and live_queue.auto_slots(1, 1) == 1
    assert launch.max_new_tokens(gpu=False) == limits.CPU_MAX_NEW_TOKENS and launch.max_new_tokens(gpu=True) == 2048
    args = launch.build_parser().parse_args(["--class-reset-key", "k", "--max-new-tokens", "128"])
    assert args.class_reset_key == "k" and args.max_new_tokens == 128 and args.concurrency is None
    server = launch.server_limits(args)  # one value for every limit, built from the flags
    assert (server.max_new_tokens, server.class_reset_key, server.call_s, server.per_address) == (128, "k", 300.0, 40)
    assert server.slots == live_queue.auto_slots(None, launch.cpu_threads(None))
    with pytest.raises(SystemExit):
        launch.check_flags(launch.build_parser().parse_args(["--proxy-hops", "-1"]))
    bare = launch.server_limits(launch.build_parser().parse_args([]))  # no flags: the holders' own defaults
    assert bare == replace(limits.ServerLimits(), slots=bare.slots, max_new_tokens=bare.max_new_tokens)


def test_installed_limits_reach_what_holds_them(monkeypatch):
    from app.server import client_share, disk_cap, file_owners
    from poss_core.runtime.model_cache import MODELS

    for name, obj in (("LIVE", live_queue), ("SHARE", client_share), ("SESSIONS", state)):
        monkeypatch.setattr(obj, name, type(getattr(obj, name))())
    before = (limits.LIMITS, MODELS.memory_bytes, client_share.PROXY_HOPS, CLASS.reset_key)
    before_disk = (disk_cap.DISK.cap_bytes, disk_cap.DISK.age_s, disk_cap.RATE.bytes_per_s)
    try:
        server = limits.ServerLimits(call_s=9.0, slots=3, per_address=7, proxy_hops=1, memory_mb=100.0, idle_s=30.0)
        server_state.install(server)
        assert limits.LIMITS is server and live_queue.LIVE.cap_s == 9.0 and live_queue.LIVE.slots == 3
        assert client_share.SHARE.per_address == 7 and client_share.PROXY_HOPS == 1
        assert state.SESSIONS.idle_s == 30.0 and MODELS.memory_bytes == 100 * 2**20
        assert file_owners.OWNERS.keep_s == server.saved_run_s
    finally:
        limits.LIMITS, MODELS.memory_bytes, client_share.PROXY_HOPS, CLASS.reset_key = before
        disk_cap.DISK.cap_bytes, disk_cap.DISK.age_s, disk_cap.RATE.bytes_per_s = before_disk


# ---------------------------------------------------------------- the bundled recordings


def test_every_example_has_a_small_bundled_recording_of_the_default_lanes():
    from poss_core.models.presets import get_preset

    d = control_defaults.ui_defaults(get_preset(DEFAULT_PRESET))
    total = 0
    for i, example in enumerate(recordings.EXAMPLES):
        path = recordings.recording_path(i, DEFAULT_PRESET)
        total += path.stat().st_size
        comp = saved_runs.load_run(path)
        assert comp.spec.messages()[-1]["content"] == example["prompt"]
        assert [lane.method for lane in comp.lanes] == state.DEFAULT_METHODS
        assert (comp.spec.depth, comp.spec.top_k, comp.spec.tree_budget, comp.spec.max_new_tokens) == (
            d["depth"],
            d["top_k"],
            d["tree_budget"],
            d["max_new_tokens"],
        )
        assert comp.hardware["dtype"] == "bfloat16" and comp.hardware["cpu"] and comp.hardware["recorded"]
        assert all(lane.events and lane.summary["stop_reason"] in ("eos", "max_new_tokens") for lane in comp.lanes)
    assert total < 512 * 1024


def test_a_compressed_run_is_bounded_once_decompressed(tmp_path, monkeypatch):
    import gzip

    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"not gzip at all")
    with pytest.raises(saved_runs.RunFileError) as unreadable:
        saved_runs.load_run(broken)
    assert wording.says(str(unreadable.value), wording.BAD_RUN_FILE, "'broken.jsonl.gz'")
    monkeypatch.setattr(saved_runs, "MAX_RUN_BYTES", 1000)
    big = tmp_path / "big.jsonl.gz"
    with gzip.open(big, "wt") as f:
        f.write("{}\n" * 1000)  # 3000 bytes once decompressed, a few dozen on disk
    with pytest.raises(saved_runs.RunFileError) as too_big:
        saved_runs.load_run(big)
    assert wording.says(str(too_big.value), wording.run_too_big(0))


def test_runs_at_other_settings_pool_apart_and_each_tab_sees_its_own_settings(empty_class):
    """One visitor's odd settings never enter the class's charts: they pool as their own group, which a tab sees
    only when its own run used them; without a run of its own a tab sees the group most runs used."""
    for i in range(2):
        live_run(req(f"class-usual-{i}"), methods=["plain", "eagle"], max_new_tokens=5)
    odd = req("class-odd")
    live_run(odd, methods=["plain", "eagle"], max_new_tokens=5, temperature=1.0)
    assert sorted(CLASS.groups("tiny-random").values()) == [1, 2]
    usual = view_handlers.view_handler(EVERYONE, request=req("class-bystander"))
    assert wording.pooled_speeds(usual["tokens_per_s"])["EAGLE"][1] == 2
    assert "temperature 0," in str(usual["pos_acc"].layout.title.text) and "1 run at other settings" in str(
        usual["pos_acc"].layout.title.text
    )
    mine = view_handlers.view_handler(EVERYONE, request=odd)
    assert wording.pooled_speeds(mine["tokens_per_s"])["EAGLE"][1] == 1
    assert "temperature 1," in str(mine["pos_acc"].layout.title.text)


def test_a_new_settings_group_past_the_cap_replaces_the_smallest_other_group():
    def run(temperature: float):
        spec = compare.RunSpec(
            "Hi", ["plain"], "tiny-random", depth=4, top_k=4, max_new_tokens=3, temperature=temperature
        )
        return compare.run_to_end(compare.start(spec.resolve()))

    pool = ClassPool(max_keys=2)
    usual, odd, odder = run(0.0), run(0.5), run(0.9)
    for _ in range(3):
        pool.add_run(usual)
    assert pool.add_run(odd) == 1 and pool.add_run(odder) == 1  # the one-run group gives way, the usual one stays
    assert list(pool.groups("tiny-random").values()) == [3, 1] and len(pool) == 2
    assert pool.view("tiny-random")["plain"].runs == 3
