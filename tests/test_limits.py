"""One set of bounds for every way in (the app's handlers, /compare, the generate and benchmark CLIs), a cap on the
work of one call, prompts that are not text, and a cancelled /compare that stops within one round."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import gradio as gr
import pytest
from app_settings import req, run_settings
from helpers import run_main

from app.actions import api, handlers
from app.server import limits
from app.sessions import state, user_settings
from poss_core.base.errors import ConfigError, PromptError
from poss_core.base.settings import BOUNDS
from poss_core.decoding import config as config_module
from poss_core.decoding.config import DecodeConfig
from poss_core.generate import main as generate_main
from poss_core.runtime import compare

VIEW = user_settings.View()


def final_status(name, **kw):
    frames = list(handlers.run_handler(run_settings(**kw), VIEW, request=req(name)))
    return frames[-1]["status"]


BAD_SETTINGS = [
    (dict(seed=1e30), "seed=1e+30 is out of range"),
    (dict(seed=-1), "seed=-1 is out of range"),
    (dict(max_new_tokens=1e9), "max_new_tokens=1000000000"),
    (dict(depth=20), "depth=20 is out of range"),
    (dict(top_k=96), "top_k=96 is out of range"),
    (dict(tree_budget=5000), "tree_budget=5000 is out of range"),
    (dict(temperature=float("inf")), "temperature=inf"),
    (dict(temperature=float("nan")), "temperature=nan"),
    (dict(top_p=float("nan")), "top_p=nan"),
    (dict(depth="deep"), "depth='deep' must be an integer"),
    (dict(depth=2.5), "depth=2.5 must be an integer"),
]


@pytest.mark.parametrize("change,needle", BAD_SETTINGS)
def test_decode_config_names_the_field_and_its_range(change, needle):
    with pytest.raises(ConfigError) as err:
        DecodeConfig.of(**{"depth": 4, "top_k": 4, "tree_budget": 16, **change})
    assert needle in str(err.value)


def test_limits_are_the_uis_slider_ranges_and_the_preset_defaults_fit():
    from app.page.ui import build_demo

    demo = build_demo("tiny-random")
    sliders = {
        c.label.split(" (")[0]: (c.minimum, c.maximum)
        for c in demo.blocks.values()
        if isinstance(c, gr.Slider) and c.label
    }
    assert sliders["Depth"] == BOUNDS["depth"] and sliders["Top-k per node"] == BOUNDS["top_k"]
    assert sliders["Tree budget"] == BOUNDS["tree_budget"] and sliders["Max new tokens"] == BOUNDS["max_new_tokens"]
    assert sliders["Temperature"] == BOUNDS["temperature"]
    from poss_core.models.presets import presets

    for p in presets().values():
        DecodeConfig(depth=p.depth, top_k=p.top_k, tree_budget=p.tree_budget)


@pytest.mark.parametrize("change,needle", BAD_SETTINGS[:8])
def test_run_handler_refuses_with_the_field_and_the_tab_still_works(change, needle):
    name = f"limits-{needle[:12]}"
    status = final_status(name, **change)
    assert "poss-status error" in status and needle in status, status
    assert not state.SESSIONS.get(req(name)).lock.locked()
    assert "Done" in final_status(name)


@pytest.mark.parametrize("change,needle", BAD_SETTINGS[:6])
def test_compare_api_refuses_with_the_field(change, needle):
    kw = dict(max_new_tokens=6, depth=4, top_k=4, tree_budget=16, seed=0)
    kw.update(change)
    before = len(compare.live_comparisons())
    with pytest.raises(gr.Error) as err:
        api.compare_api("Hello", ["plain", "eagle"], preset="tiny-random", **kw)
    assert needle in str(err.value)
    assert len(compare.live_comparisons()) == before


@pytest.mark.parametrize(
    "prompt,needle",
    [
        (b"\xff\xfe bytes", "prompt must be text, not bytes"),
        (["a", "list"], "prompt must be text, not list"),
        (12345, "prompt must be text, not int"),
        ("caf\udce9", "not valid UTF-8"),  # undecodable bytes as Python carries them (surrogateescape)
        ("a\x00b", "NUL character"),
        ("x" * (config_module.MAX_PROMPT_CHARS + 1), f"the most is {config_module.MAX_PROMPT_CHARS}"),
    ],
)
def test_odd_prompts_get_a_clear_error(prompt, needle):
    status = final_status("odd-prompt", prompt=prompt)
    assert "poss-status error" in status and needle in status, status
    with pytest.raises(gr.Error, match=needle.replace("(", r"\(")):
        api.compare_api(prompt, ["plain"], preset="tiny-random", max_new_tokens=4)
    assert "Done" in final_status("odd-prompt")


def test_prompt_tokens_are_bounded(monkeypatch):
    monkeypatch.setattr(config_module, "MAX_PROMPT_TOKENS", 20)
    status = final_status("long-prompt", prompt="word " * 40)
    assert "tokens: the most is 20" in status, status
    with pytest.raises(PromptError, match="the most is 20"):
        config_module.check_prompt_tokens(21)
    with pytest.raises(PromptError, match="context window is 16"):
        config_module.check_prompt_tokens(16, max_context=16)


def test_per_call_cap_stops_a_run_and_a_compare_call(monkeypatch):
    # A cap already spent: the call stops before it loads anything, and says so.
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, call_s=0.0))
    status = final_status("capped0", max_new_tokens=400)
    assert "limit of 0 s per call" in status, status
    assert state.SESSIONS.get(req("capped0")).comparison is None
    # A cap reached while decoding: every lane ends cleanly, within a round of the cap.
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, call_s=0.3))
    status = final_status("capped", max_new_tokens=2000, methods=["plain", "eagle", "poss2"])
    assert "limit of 0.3 s per call" in status, status
    comp = state.SESSIONS.get(req("capped")).comparison
    assert comp.timed_out and all(lane.stop_reason == "cancelled" for lane in comp.lanes)
    # Some lane decoded before the cap (on a loaded machine the cap may come before a later lane's prefill)
    assert any(lane.token_ids for lane in comp.lanes) and all(len(lane.token_ids) < 2000 for lane in comp.lanes)
    out = api.compare_api(
        "Hello", ["plain", "eagle"], preset="tiny-random", max_new_tokens=2000, depth=4, top_k=4, tree_budget=16
    )
    assert out["timed_out"] is True and "limit" in out["note"]
    assert all(lane["stop_reason"] == "cancelled" and lane["summary"]["new_tokens"] < 2000 for lane in out["lanes"])
    assert comp not in compare.live_comparisons()


async def answer_of(endpoint_call):
    """The last value an async-generator endpoint yields (its answer; the ones before are progress)."""
    last = None
    async for value in endpoint_call:
        last = value
    return last


def test_a_cancelled_compare_call_stops_within_one_round(monkeypatch):
    started = []
    real_start = compare.start

    def recording_start(run, *a, **k):
        comp = real_start(run, *a, **k)
        started.append(comp)
        return comp

    monkeypatch.setattr(compare, "start", recording_start)
    endpoint = api.compare_endpoint("tiny-random")

    async def scenario():
        task = asyncio.create_task(
            answer_of(
                endpoint("Tell me a long story", ["plain", "eagle", "poss2"], "", 450, 0.0, 1.0, 4, 4, 16, 0, "auto")
            )
        )
        for _ in range(600):
            await asyncio.sleep(0.02)
            if started and len(started[0].lanes[0].events) >= 3:
                break
        assert started, "the comparison never started"
        at_cancel = [len(lane.events) for lane in started[0].lanes]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return at_cancel

    at_cancel = asyncio.run(scenario())
    comp = started[0]
    deadline = time.monotonic() + 30
    while comp in compare.live_comparisons() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert comp not in compare.live_comparisons(), "the cancelled comparison is still decoding"
    assert comp.cancelled
    grew = [len(lane.events) - n for lane, n in zip(comp.lanes, at_cancel)]
    assert all(g <= 1 for g in grew), grew
    assert all(lane.stop_reason == "cancelled" for lane in comp.lanes)
    assert max(len(lane.events) for lane in comp.lanes) < 100


def cli(*args):
    return run_main(generate_main, ["--preset", "tiny-random", "--method", "plain", *args])


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--seed", "100000000000000000000000"], "seed=100000000000000000000000 is out of range"),
        (["--temperature", "inf"], "temperature=inf"),
        (["--max-new-tokens", "1000000000"], "max_new_tokens=1000000000 is out of range"),
        (["--depth", "20"], "depth=20 is out of range"),
        (["--tree-budget", "5000"], "tree_budget=5000 is out of range"),
    ],
)
def test_generate_cli_refuses_before_loading_a_model(args, needle, monkeypatch):
    from poss_core import generate

    monkeypatch.setattr(generate, "load_preset_target", lambda *a, **k: pytest.fail("checked after loading"))
    r = cli("--prompt", "hi", *args)
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode != 0 and len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_generate_cli_refuses_an_undecodable_prompt_before_loading(monkeypatch):
    from poss_core import generate

    monkeypatch.setattr(generate, "load_preset_target", lambda *a, **k: pytest.fail("checked after loading"))
    r = cli("--prompt", b"caf\xe9".decode("utf-8", "surrogateescape"))
    assert r.returncode == 2 and "error: --prompt is not valid UTF-8" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--depth", "20"], "depth=20 is out of range"),
        (["--temperature", "inf"], "temperature=inf"),
        (["--seed", "100000000000000000000000"], "seed=100000000000000000000000"),
        (["--max-new-tokens", "1000000000"], "max_new_tokens=1000000000"),
        (["--tree-budget", "auto", "--max-tree-budget", "5000"], "--max-tree-budget=5000 is out of range"),
        (["--warmup-tokens", "0"], "--warmup-tokens=0 is out of range"),
    ],
)
def test_bench_cli_refuses_with_the_same_bounds(args, needle, tmp_path):
    from poss_core.bench.cli import main as bench_main

    r = run_main(
        bench_main,
        ["--preset", "tiny-random", "--data", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "out"), *args],
    )
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode != 0 and len(lines) == 1 and needle in lines[0], r.stderr
