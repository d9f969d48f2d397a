"""No lane can hang the benchmark without an error: an exception inside transformers' `generate` surfaces naming the
method and question, a `generate` whose streamer is never called ends with the stall error within its bound (worker
thread or the benchmark's own thread), a decode stuck where Python cannot interrupt it ends the process with exit code
4 and the error, progress inside `generate` keeps a slow decode alive, and a log gets one line per finished decode."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from poss_core.base.errors import ConfigError, StallError
from poss_core.bench import cli, runner
from poss_core.bench.stall import EXIT_STALLED, LaneError, StallWatch
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder, encode_prompt
from poss_core.decoding.hf_generate import HFGenerateDecoder
from poss_core.models.tiny import tiny_target as make_tiny

QUESTIONS = [runner.Question("alpaca", 7, "", ["abc abc abc"])]


@pytest.fixture
def target():
    """A fresh tiny target per test: the tests patch its model."""
    return make_tiny(seed=0)


@pytest.fixture
def release():
    """An event a blocked fake `generate` waits on; set at teardown so no thread outlives the test."""
    ev = threading.Event()
    yield ev
    ev.set()


def hf_lane(target, cfg: DecodeConfig, in_caller_thread: bool, stall_s: float | None = 60.0) -> runner.BenchLane:
    dec = HFGenerateDecoder(target, cfg, "plain", in_caller_thread=in_caller_thread, stall_s=stall_s)
    return runner.BenchLane("plain-hf", "Plain decoding (transformers' generate)", dec)


def raise_in_forward(target, after: int = 2) -> None:
    """A forward hook that raises on the target's `after`-th forward: an error deep inside generate."""
    calls = {"n": 0}

    def hook(*_):
        calls["n"] += 1
        if calls["n"] >= after:
            raise RuntimeError("device-side assert triggered (simulated)")

    target.model.register_forward_hook(hook)


def generate_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("generate-") and t.is_alive()]


def test_an_exception_inside_generate_surfaces_from_the_worker_thread(target):
    raise_in_forward(target)
    dec = HFGenerateDecoder(target, DecodeConfig(max_new_tokens=16), "plain", stall_s=30)
    ids = encode_prompt(target.tokenizer, "abc abc")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="device-side assert"):
        list(dec.generate(ids))
    assert time.monotonic() - t0 < 20
    assert not generate_threads()


@pytest.mark.parametrize("in_caller_thread", [True, False])
def test_an_exception_inside_generate_fails_the_benchmark_naming_the_lane_and_question(target, in_caller_thread):
    raise_in_forward(target)
    lane = hf_lane(target, DecodeConfig(max_new_tokens=16), in_caller_thread)
    with StallWatch(30) as watch, pytest.raises(LaneError) as err:
        runner.run_questions([lane], target, QUESTIONS, 1, progress=False, watch=watch)
    text = str(err.value)
    assert "plain-hf" in text and "alpaca/7 turn 0" in text and "RuntimeError: device-side assert" in text


def test_a_generate_whose_streamer_never_yields_ends_with_the_stall_error(target, release, monkeypatch):
    monkeypatch.setattr(target.model, "generate", lambda *a, **k: release.wait(60))
    dec = HFGenerateDecoder(target, DecodeConfig(max_new_tokens=16), "plain", stall_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(StallError, match=r"plain-hf .*made no progress"):
        list(dec.generate(encode_prompt(target.tokenizer, "abc abc")))
    assert time.monotonic() - t0 < 10  # the bound, not the 60 s the fake generate would take


def test_a_generate_that_ends_without_a_word_is_an_error_not_a_wait(target, monkeypatch):
    dec = HFGenerateDecoder(target, DecodeConfig(max_new_tokens=16), "plain", stall_s=600)
    monkeypatch.setattr(dec, "_work", lambda *a: None)  # the worker ends without "done" or "error"
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="ended without a result"):
        list(dec.generate(encode_prompt(target.tokenizer, "abc abc")))
    assert time.monotonic() - t0 < 10


def test_the_watch_ends_generate_stuck_in_the_benchmarks_own_thread(target, release, monkeypatch):
    def stuck(*args, streamer, **kwargs):
        streamer.put(args[0].cpu())  # the prompt, then nothing: a forward that never returns
        while not release.wait(0.02):  # Python code, so the watch's signal can end it
            pass

    monkeypatch.setattr(target.model, "generate", stuck)
    exits = []
    lane = hf_lane(target, DecodeConfig(max_new_tokens=16), in_caller_thread=True)
    t0 = time.monotonic()
    with StallWatch(0.3, grace_s=30, hard_exit=exits.append) as watch, pytest.raises(StallError) as err:
        runner.run_questions([lane], target, QUESTIONS, 1, progress=False, watch=watch)
    assert time.monotonic() - t0 < 15
    assert "plain-hf" in str(err.value) and "alpaca/7 turn 0" in str(err.value) and "no progress" in str(err.value)
    assert exits == []  # ended by the error, not by ending the process


class StuckAfterOneRound(PlainDecoder):
    """Plain decoding that yields its first round and then stops making progress (in Python)."""

    def generate(self, input_ids, cancel=None):
        rounds = super().generate(input_ids, cancel)
        yield next(rounds)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            time.sleep(0.02)
        yield from rounds


def test_the_watch_ends_any_lane_that_stops_making_rounds(target):
    lane = runner.BenchLane("eagle", "EAGLE", StuckAfterOneRound(target, DecodeConfig(max_new_tokens=16)))
    ok = runner.BenchLane("plain", "Plain decoding", PlainDecoder(target, DecodeConfig(max_new_tokens=8)))
    t0 = time.monotonic()
    with (
        StallWatch(0.3) as watch,
        pytest.raises(StallError, match=r"eagle \(EAGLE\), decoding run 1 alpaca/7 turn 0, made no progress"),
    ):
        runner.run_questions([ok, lane], target, QUESTIONS, 1, progress=False, watch=watch)
    assert time.monotonic() - t0 < 15


def test_progress_inside_generate_keeps_a_slow_decode_alive(target):
    """Six forwards of 0.5 s each (3 s in all) under a 2 s bound: the streamer's beats keep the decode alive, although
    its rounds reach the benchmark only when generate returns."""
    target.model.register_forward_pre_hook(lambda *_: time.sleep(0.5))
    lane = hf_lane(target, DecodeConfig(max_new_tokens=6), in_caller_thread=True)
    with StallWatch(2.0, hard_exit=lambda code: pytest.fail(f"hard exit {code}")) as watch:
        records, _ = runner.run_questions([lane], target, QUESTIONS, 1, progress=False, watch=watch)
    assert records[0].wall_time > 2.0 and len(records[0].token_ids) >= 1


def test_a_decode_that_never_returns_to_python_ends_the_process_with_the_error(tmp_path):
    """The main thread blocks the watch's signal (as a C call that never returns would ignore it): after the grace
    period the process prints the error and exits with code 4."""
    code = textwrap.dedent(
        """
        import signal, time
        from poss_core.bench.stall import StallWatch
        with StallWatch(0.2, grace_s=0.3) as watch:
            with watch.watching("plain-hf, decoding run 1 gsm8k/3 turn 0,"):
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
                time.sleep(20)
        print("not reached")
        """
    )
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_STALLED, proc.stderr
    assert "plain-hf, decoding run 1 gsm8k/3 turn 0, made no progress" in proc.stderr
    assert "not reached" not in proc.stdout
    assert time.monotonic() - t0 < 15


def test_without_a_terminal_each_finished_decode_is_one_line(target, capsys):
    lanes = [
        runner.BenchLane("plain", "Plain decoding", PlainDecoder(target, DecodeConfig(max_new_tokens=5))),
        hf_lane(target, DecodeConfig(max_new_tokens=5), in_caller_thread=True),
    ]
    questions = QUESTIONS + [runner.Question("gsm8k", 3, "", ["one", "two"])]
    with StallWatch(60) as watch:
        records, _ = runner.run_questions(lanes, target, questions, 1, progress=True, watch=watch)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[bench] ")]
    assert len(lines) == len(records) == 6
    assert lines[-1].startswith("[bench] 6/6 run 1 ")
    for rec in records:
        assert any(
            f"{rec.dataset}/{rec.question_id} turn {rec.turn} {rec.method}: {len(rec.token_ids)} tokens in " in ln
            for ln in lines
        )
    assert runner.progress_mode(True, stream=sys.stderr) == "lines"  # pytest's capture is not a terminal
    assert runner.progress_mode(False) == "none"


def test_the_bound_is_a_flag_checked_before_loading():
    args = cli.build_parser().parse_args(["--data", "x.jsonl", "--stall-seconds", "-1"])
    with pytest.raises(ConfigError, match="--stall-seconds"):
        cli.tree_budget_arg(args)
    assert cli.build_parser().parse_args(["--data", "x.jsonl"]).stall_seconds > 60


def test_the_watch_is_free_when_off():
    watch = StallWatch(0)
    with watch, watch.watching("x"):
        watch.beat()
    assert watch._thread is None
