"""The public-server cases against a real `python app.py` on 127.0.0.1 (scripts/server_harness.py starts it, in its
own temp and cache folders): a call's work ends within its cap, work stops when its clients die, one client cannot
fill the queue, the temp folders shrink back, and a refused input leaves no traceback in the log; and, on the tiny
model with the server's defences on, each hostile case's own criterion: replays nobody reads leave room for an honest
page load, huge JSON bodies are refused before they are read, unread page loads hold little memory, and wrongly typed
calls barely grow the log."""

from __future__ import annotations

import multiprocessing
import sys
import time
from pathlib import Path

import pytest
import wording

from app.server import limits
from poss_core.models.presets import DEFAULT_PRESET

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the scripts import their sibling modules by name

import server_cases_logs  # noqa: E402
import server_cases_memory  # noqa: E402
import server_cases_queue  # noqa: E402
import server_cases_uploads  # noqa: E402
import server_check  # noqa: E402
import server_clients  # noqa: E402
from server_harness import Server, folder_mb  # noqa: E402

pytestmark = pytest.mark.slow


def test_an_oracle_call_ends_within_its_cap():
    # Before: its reference decode ran before the cap's clock (459 s against a 20 s cap in the review).
    with Server(ROOT, DEFAULT_PRESET, 8.0, []) as server:
        took, how = server_clients.timed_compare(
            server.url,
            server_clients.compare_args(server_clients.LONG_PROMPT, ["plain", "oracle"], 2048, temperature=2.0),
            120,
        )
        assert took < 8.0 + 6.0, (took, how)  # the cap, one round, and the client's own overhead
        assert wording.says_call_limit(how, 8), how
        assert server.cpu_percent(2.0) < 30


def test_calls_whose_clients_died_stop():
    with Server(ROOT, DEFAULT_PRESET, 60.0, []) as server:
        server_clients.client(server.url).predict(*server_clients.compare_args("Hi", ["plain"], 1), api_name="/compare")
        procs = [
            multiprocessing.Process(
                target=server_cases_queue.long_call, args=(server.url, server_clients.LONG_PROMPT[:2000])
            )
            for _ in range(2)
        ]
        for p in procs:
            p.start()
        time.sleep(6.0)
        assert server.cpu_percent(1.0) > 50  # they are decoding
        for p in procs:
            p.kill()
        time.sleep(3.0)
        assert server.cpu_percent(3.0) < 25, "the server kept working for clients that had gone"


def test_one_client_gets_its_share_of_the_queue_and_no_more():
    with Server(ROOT, DEFAULT_PRESET, 4.0, ["--max-calls-per-client", "2"]) as server:
        c = server_clients.client(server.url)
        jobs = [
            c.submit(
                *server_clients.compare_args(
                    server_clients.LONG_PROMPT[:2000], ["plain", "eagle"], 2048, depth=4, top_k=4, tree_budget=16
                ),
                api_name="/compare",
            )
            for _ in range(5)
        ]
        outcomes = []
        for job in jobs:
            try:
                outcomes.append(job.result(timeout=120))
            except Exception as err:  # noqa: BLE001
                outcomes.append(str(err))
        refused = [o for o in outcomes if isinstance(o, str) and wording.says_share_used(o, 2)]
        assert len(refused) >= 3, outcomes
        other = server_clients.client(server.url)  # another client is let in meanwhile
        assert other.predict(*server_clients.compare_args("Hi", ["plain"], 1), api_name="/compare")["lanes"]


def test_the_temp_folders_shrink_back_and_refusals_log_no_traceback(tmp_path):
    files = [server_clients.saved_run(tmp_path / f"run{i}.jsonl", i) for i in range(3)]
    # A tab's saved runs are kept while it lives and --saved-run-minutes after: both short here.
    short = ["--cache-minutes", "0.05", "--idle-minutes", "0.05", "--saved-run-minutes", "0.05"]
    with Server(ROOT, "tiny-random", 20.0, short) as server:
        from gradio_client import handle_file

        c = server_clients.client(server.url)
        view = ["draft position", False, "conditional (POSS pos-acc)", "this run"]
        for f in files:
            c.predict(handle_file(str(f)), *view, api_name="/load_run")
            c.predict(api_name="/save_run")
            c.predict(api_name="/save_run")  # the same run again: no second file
        assert len(list(server.dir.rglob("poss-run-*.jsonl"))) == 3
        assert folder_mb(server.gradio_tmp) > 0.1
        with pytest.raises(Exception) as refused:
            c.predict(*server_clients.compare_args("Hi", ["plain", "eagle"], 4, depth=20), api_name="/compare")
        assert wording.says(str(refused.value), wording.out_of_range("depth", 20))
        time.sleep(12.0)
        assert folder_mb(server.gradio_tmp) + folder_mb(server.tmp) < 0.05, "the temp folders grew"
        assert "Traceback" not in server.log_text()


@pytest.mark.parametrize(
    "case",
    [
        # Before: 75.6 s against a 20 s cap (each lane read its 2,040-token prompt in one forward).
        ["prefill", "--preset", DEFAULT_PRESET, "--cap", "20", "--prompt-tokens", "2016"],
        # Before: a visitor from another address was told place 15 and 87 s, and waited 71 s.
        ["fair", "--preset", DEFAULT_PRESET, "--cap", "4", "--flood-clients", "8"],
        # Before: reading /view kept every tab's paused Step and loaded run past --idle-minutes.
        ["memory", "--preset", DEFAULT_PRESET, "--steps", "8", "--loads", "6", "--prompt-tokens", "1000"],
    ],
    ids=lambda case: case[0],
)
def test_the_memory_queue_and_prefill_cases_pass(case, capsys):
    server_check.main(case)
    said = capsys.readouterr().out
    assert "PASS" in said and "FAIL" not in said, said


@pytest.fixture
def tiny_server():
    """The tiny model's server as `python scripts/server_check.py CASE` starts it: a 20 s cap, no other flag."""
    with Server(ROOT, "tiny-random", 20.0, []) as server:
        yield server


def test_an_honest_page_load_completes_after_replays_nobody_reads(tiny_server):
    # Before: all 128 joins were let in, and on a loaded machine the honest load got 503 for 226 s.
    replays = server_cases_queue.replay_flood(tiny_server, 128, load_wait=60.0)
    assert replays.load_how == "completed", replays
    assert replays.load_s <= server_cases_queue.HONEST_LOAD_S, replays


def test_huge_json_bodies_are_refused_before_they_are_read(tiny_server):
    # Before: each was read whole (3 x 200), the server's RSS 2,990 MB above its start.
    bodies = server_cases_uploads.big_bodies(tiny_server, 3, 200.0)
    assert bodies.answers == [413, 413, 413], bodies
    assert bodies.grew_mb < server_cases_uploads.BODY_RSS_MB, bodies


def test_unread_page_loads_hold_little_memory(tiny_server):
    # Before: RSS 325 MB above the start 35 s after 2,000 loads. 400 here, not the case's 2,000: sent in about 16 s
    # instead of 80 on a 2-core machine (the first few hundred already fill what an address may queue).
    tabs = server_cases_memory.unread_tabs(tiny_server, 400, wait_s=35.0)
    assert sum(tabs.answers.values()) == 400, tabs
    assert tabs.held_mb < server_cases_memory.TABS_HELD_MB, tabs


def test_pages_held_open_from_one_address_hold_little_memory(tiny_server):
    # An attacker holding its pages' heartbeats open keeps their unread loads from being dropped: one address gets
    # at most --max-pages-per-address open pages and --max-light-per-address such loads, whatever it opens.
    pages = server_cases_memory.held_pages(tiny_server, 400, wait_s=10.0)
    assert pages.opened == limits.DEFAULTS.pages_per_address and sum(pages.answers.values()) == 400, pages
    assert pages.answers.get(200, 0) <= limits.DEFAULTS.light_per_address, pages
    assert pages.held_mb < server_cases_memory.TABS_HELD_MB, pages


def test_wrongly_typed_calls_barely_grow_the_log(tiny_server):
    # Before: a line each, 1,937 log bytes a second.
    malformed = server_cases_logs.malformed_calls(tiny_server, 5.0)
    assert malformed.calls > 0, malformed
    assert malformed.per_s < server_cases_logs.MALFORMED_BYTES_PER_S, malformed
