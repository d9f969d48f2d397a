"""The evidence summary: Wilson intervals and τ's bootstrap (metrics), the summary built from known records, the
benchmark writing it, the loader refusing bad files, the shared chart code, and the Evidence tab's handlers on a
fresh tiny benchmark run."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import gradio as gr
import pytest
import wording
from helpers import PLOTLY_MARKUP, assert_shown_as_text, plotly_strings
from test_bench import DEPTH, known_records

from app.page import evidence_view
from app.server import limits
from app.views import render
from poss_core.base.errors import ConfigError
from poss_core.bench import cli
from poss_core.models.presets import DEFAULT_PRESET, get_preset
from poss_core.results import analysis, evidence, evidence_schema, loading
from poss_core.rounds import metrics
from poss_core.runtime.methods import label_of
from poss_core.views import draft_tree, figures

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- statistics (poss_core.rounds.metrics)


def test_wilson_interval_against_a_hand_computation():
    # 3 of 4: p = .75, z² = 3.8415, centre = (.75 + z²/8) / (1 + z²/4) = .6275,
    # half = z·√(p(1−p)/4 + z²/64) / 1.9604 = .3269
    lo, hi = metrics.wilson_interval(3, 4)
    assert lo == pytest.approx(0.3006, abs=1e-4) and hi == pytest.approx(0.9544, abs=1e-4)
    lo, hi = metrics.wilson_interval(8, 12)
    assert lo == pytest.approx(0.3906, abs=1e-4) and hi == pytest.approx(0.8619, abs=1e-4)
    assert metrics.wilson_interval(0, 10)[0] == 0.0 and metrics.wilson_interval(0, 10)[1] == pytest.approx(
        0.2775, abs=1e-4
    )
    assert metrics.wilson_interval(5, 5)[1] == 1.0
    assert all(math.isnan(v) for v in metrics.wilson_interval(0, 0))


def test_bootstrap_tau_over_questions():
    same = [[(30, 10)] * 4, [(20, 10)] * 3]  # every question of a dataset alike: no spread
    out = metrics.bootstrap_tau(same, resamples=200)
    assert out["pooled"] == (pytest.approx(18 / 7), pytest.approx(18 / 7), pytest.approx(18 / 7))  # 180 over 70
    assert out["mean_of_datasets"] == (pytest.approx(2.5), pytest.approx(2.5), pytest.approx(2.5))  # (3 + 2) / 2
    tau, lo, hi = metrics.bootstrap_tau([[(10, 10), (40, 10), (20, 10), (30, 10)]], resamples=500)["pooled"]
    assert tau == pytest.approx(2.5) and 1.0 <= lo < tau < hi <= 4.0


def test_acceptance_stats_from_events_give_counts_and_intervals():
    from test_bench import events as bench_events

    st = metrics.acceptance_stats(bench_events([2, 0, 3, 1], 1.0), DEPTH)
    assert st.hist == [1, 1, 1, 1] and st.rounds == 4 and st.drafted_depth == DEPTH
    assert st.counts(True) == ([3, 2, 1], [4, 3, 2]) and st.counts(False) == ([3, 2, 1], [4, 4, 4])
    assert st.intervals(True)[0] == metrics.wilson_interval(3, 4)
    assert st.rates(False) == pytest.approx([0.75, 0.5, 0.25]) and st.tau == pytest.approx(2.5)


# ---------------------------------------------------------------- the summary from known records


@pytest.fixture(scope="module")
def known():
    records = known_records()
    return records, evidence.build_evidence(records, {"preset": "tiny-random", "command": "python -m unit"}, DEPTH)


def test_summary_of_known_records_has_the_right_counts_and_intervals(known):
    _, ev = known
    assert (
        ev["schema"] == evidence_schema.SCHEMA
        and ev["version"] == evidence_schema.VERSION
        and ev["datasets"] == ["d1", "d2"]
    )
    assert [m["name"] for m in ev["methods"]] == ["plain", "plain-hf", "eagle", "poss2"]
    eagle = ev["results"]["eagle"]
    # eagle's accept lengths: d1 2, 0, 3, 1 and d2 1, 0, each in two runs: hist 4, 4, 2, 2; reached 12, 8, 4, 2.
    acc = eagle["scopes"]["overall"]["acceptance"]
    assert acc["hist"] == [4, 4, 2, 2] and acc["drafted_depth"] == DEPTH
    k1, k2, k3 = acc["positions"]
    assert (k1["pos_acc"]["n"], k2["pos_acc"]["n"], k3["pos_acc"]["n"]) == (12, 8, 4)  # rounds that reached k−1
    assert [p["rate"]["n"] for p in acc["positions"]] == [12, 12, 12]  # every round
    assert k1["pos_acc"]["value"] == pytest.approx(8 / 12, rel=1e-5)
    assert (k1["pos_acc"]["low"], k1["pos_acc"]["high"]) == (
        pytest.approx(0.3906, abs=1e-4),
        pytest.approx(0.8619, abs=1e-4),
    )
    assert k2["pos_acc"]["value"] == 0.5 and k3["rate"]["value"] == pytest.approx(2 / 12, rel=1e-5)
    assert [p["deviation_n"] for p in acc["positions"]] == [8, 4, 2] and k2["l2"] == pytest.approx(2.0)
    d1 = eagle["scopes"]["d1"]
    assert d1["tau"]["value"] == pytest.approx(2.5) and d1["tau"]["n"] == 8 and d1["questions"] == 1
    assert d1["speedup"]["mean"] == pytest.approx((1.76 + 0.5) / 2) and d1["speedup"]["runs"] == 2
    assert eagle["tau_mean_of_datasets"]["value"] == pytest.approx(2.0)
    assert ev["results"]["poss2"]["tau_vs_eagle"]["value"] == pytest.approx(0.75)
    assert "tau_vs_eagle" not in eagle
    assert ev["meta"]["command"] == "python -m unit" and ev["meta"]["summary_command"] == "python -m unit"
    assert ev["identity"]["reference"] == "plain"


def test_summary_round_trips_and_draws_like_the_events(known, tmp_path):
    records, ev = known
    path = evidence.write_evidence(tmp_path / "e.json", ev)
    back = evidence.load_evidence(path)
    assert json.loads(path.read_text()) == ev and back == evidence.Evidence.model_validate(ev)
    stats = back.acceptance()["EAGLE"]
    events = analysis.pooled_events_by_method(records, ["eagle"])["eagle"]
    assert stats.rates(True) == pytest.approx(metrics.pos_acc(events, DEPTH), rel=1e-5)
    # One drawing code for both paths: the same lines and the same Wilson error bars.
    from_stats = figures.pos_acc_figure({"EAGLE": stats}, colors={"EAGLE": "#0072B2"})
    from_events = figures.pos_acc_figure({"EAGLE": events}, depth=DEPTH, colors={"EAGLE": "#0072B2"})
    a, b = from_stats.data[0], from_events.data[0]
    assert list(a.y) == pytest.approx(list(b.y), rel=1e-5)
    assert list(a.error_y.array) == pytest.approx(list(b.error_y.array), rel=1e-4)
    assert a.error_y.arrayminus[0] == pytest.approx(8 / 12 - metrics.wilson_interval(8, 12)[0], rel=1e-4)
    assert "EAGLE n=12" in from_stats.layout.title.text and "Wilson" in from_stats.layout.title.text
    dev = figures.feature_deviation_figure({"EAGLE": stats})
    assert list(dev.data[0].y) == pytest.approx([1.0, 2.0, 3.0]) and "EAGLE n=8" in dev.layout.title.text


def test_tau_and_speedup_charts_show_intervals_and_sizes(known):
    ev = evidence.Evidence.model_validate(known[1])
    tau = figures.tau_figure(*ev.taus(), colors=ev.colors())
    eagle = next(t for t in tau.data if t.name == "EAGLE")
    assert list(eagle.x) == ["d1", "d2", "mean of datasets"] and list(eagle.y) == pytest.approx([2.5, 1.5, 2.0])
    assert "EAGLE n=12" in tau.layout.title.text  # rounds: 8 on d1, 4 on d2
    speed, tps = ev.speedups()
    fig = figures.speedup_figure(speed, tps, colors=ev.colors())
    assert list(fig.data[0].x) == ["Plain", "Plain (generate)", "EAGLE", "POSS-2"]
    assert "EAGLE n=2" in fig.layout.title.text
    assert fig.data[0].error_y.array[2] == pytest.approx(
        known[1]["results"]["eagle"]["scopes"]["overall"]["speedup"]["std"], rel=1e-5
    )


def _hostile(text: str, i: int) -> str:
    return f'<a href="https://evil.example/{i}">{text}</a><span style="font-size:90px">{i}</span>'


def test_method_and_dataset_names_from_a_summary_show_as_text_in_every_chart(known):
    # An uploaded summary names its methods and datasets: Plotly would make them links and styled spans in legends,
    # hover texts, axis categories and titles. Each shows as text, in every chart the tab draws.
    data = json.loads(json.dumps(known[1]))
    renamed = {d: _hostile(d, i) for i, d in enumerate(data["datasets"])}
    data["datasets"] = [renamed[d] for d in data["datasets"]]
    for i, info in enumerate(data["methods"]):
        info["short"], info["label"] = _hostile(info["short"], i), _hostile(info["label"], i)
    for result in data["results"].values():
        result["scopes"] = {renamed.get(k, k): v for k, v in result["scopes"].items()}
    ev = evidence.Evidence.model_validate(data)
    out = evidence_view.evidence_outputs(ev, PLOTLY_MARKUP)
    for name in ("tau", "speedup", "pos_acc", "pos_rate", "deviation"):
        assert_shown_as_text(out[name])
    assert any('&lt;a href="https://evil.example/1"&gt;d2' in s for s in plotly_strings(out["tau"]))  # a category
    for chart in evidence_view.scoped_charts(ev, data["datasets"][0]).values():  # its name in the note too
        assert_shown_as_text(chart)
    assert "<a " not in out["header"] + out["table"] and "&lt;a href" in out["table"]


def test_every_label_a_chart_draws_goes_through_one_escape():
    from test_bench import events as bench_events

    runs = {PLOTLY_MARKUP: bench_events([2, 0, 3, 1], 1.0)}
    for fig in (
        figures.pos_acc_figure(runs, note=PLOTLY_MARKUP),
        figures.feature_deviation_figure(runs),
        figures.accept_hist_figure(runs),
        figures.tokens_per_s_figure(runs),
        figures.empty_figure(PLOTLY_MARKUP, title=PLOTLY_MARKUP),
    ):
        assert_shown_as_text(fig)
    event = runs[PLOTLY_MARKUP][2]
    tree = draft_tree.tree_figure(
        event,
        labels=[PLOTLY_MARKUP] * len(event.nodes),
        root_label=PLOTLY_MARKUP,
        bonus_label=PLOTLY_MARKUP,
        title=PLOTLY_MARKUP,
    )
    assert_shown_as_text(tree)
    # Plotly decodes the entities after reading its tags: the text it shows is the text given.
    assert figures.plotly_text("a < b & c > d %{x}") == "a &lt; b &amp; c &gt; d %&#123;x}"
    assert figures.plotly_text("plain text, 100%") == "plain text, 100%"


# ---------------------------------------------------------------- the loader refuses what is not a summary


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text, says",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2, 3]", "not an evidence summary"),
        ('{"schema": "something-else"}', "not an evidence summary"),
        ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
    ],
)
def test_loader_refuses_corrupt_or_foreign_json(tmp_path, text, says):
    with pytest.raises(ConfigError, match=says):
        evidence.load_evidence(_write(tmp_path, "x.json", text))


def test_loader_refuses_another_version_and_bad_fields(known, tmp_path):
    newer = {**known[1], "version": evidence_schema.VERSION + 1}
    with pytest.raises(ConfigError, match="this app reads versions 1, 2"):
        evidence.load_evidence(_write(tmp_path, "v.json", json.dumps(newer)))
    bad = json.loads(json.dumps(known[1]))
    bad["results"]["eagle"]["scopes"]["overall"]["acceptance"]["hist"] = [1] * 10_000
    with pytest.raises(ConfigError, match="hist"):
        evidence.load_evidence(_write(tmp_path, "h.json", json.dumps(bad)))
    bad = json.loads(json.dumps(known[1]))
    bad["methods"][2]["color"] = "red;background:url(x)"
    with pytest.raises(ConfigError, match="color"):
        evidence.load_evidence(_write(tmp_path, "c.json", json.dumps(bad)))


def test_loader_refuses_oversized_files_and_non_results_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(evidence, "MAX_EVIDENCE_BYTES", 100)
    with pytest.raises(ConfigError, match="over the"):
        evidence.load_evidence(_write(tmp_path, "big.json", "{" + " " * 200 + "}"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a results folder"):
        evidence.load_evidence(tmp_path / "empty")
    with pytest.raises(ConfigError, match="does not exist"):
        evidence.load_evidence(tmp_path / "nothing.json")


def test_loader_refuses_hostile_records(known, tmp_path):
    row = known_records()[0].to_json()
    huge = json.loads(json.dumps(row))
    huge["rounds"]["accept_len"] = [10**9]  # would allocate a billion-entry histogram
    many_runs = [{**row, "run": i} for i in range(evidence.MAX_RUNS + 1)]  # bounds the work aggregation does
    for name, lines, says in [
        ("huge", [huge], "accept_len"),
        ("text", ["hello"], "line 1 is not valid JSON"),
        ("runs", many_runs, "21 runs; a summary covers at most 20"),
        ("short", [{"run": 0}], "line 1 is not a benchmark record"),
        ("none", [], "no benchmark"),
    ]:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "records.jsonl").write_text(
            "".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines)
        )
        with pytest.raises(ConfigError, match=says):
            evidence.load_evidence(folder)


def test_loader_bounds_the_rounds_it_builds_a_summary_from(known, tmp_path, monkeypatch, capsys):
    # The cost of building a summary is Python work per round: the app refuses more than MAX_ROUNDS before building
    # anything and says how to summarise the run instead; the command line, which is that way, has no such cap.
    rows = [r.to_json() for r in known_records()]
    total = sum(len(row["rounds"]["accept_len"]) for row in rows)
    folder = tmp_path / "results" / "many"
    folder.mkdir(parents=True)
    (folder / "records.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    monkeypatch.setattr(evidence, "MAX_ROUNDS", total - 1)
    with pytest.raises(ConfigError, match=f"more than {total - 1:,} rounds.*python -m poss_core.bench evidence"):
        evidence.load_evidence(folder)
    with pytest.raises(ConfigError, match="rounds"):
        evidence.load_evidence(folder / "records.jsonl")
    assert evidence.evidence_main([str(folder), "--out", str(tmp_path / "ev.json")]) == 0
    assert evidence.load_evidence(tmp_path / "ev.json").datasets == ["d1", "d2"]
    monkeypatch.setattr(evidence, "MAX_ROUNDS", total)
    assert evidence.load_evidence(folder).datasets == ["d1", "d2"]


def test_evidence_loads_queue_one_at_a_time_apart_from_decoding():
    from app.page import ui

    demo = ui.build_demo("tiny-random")
    loads = [fn for fn in demo.fns.values() if fn.concurrency_id == "evidence"]
    assert loads and evidence_view.LOAD_CONCURRENCY == 1
    assert {fn.concurrency_limit for fn in loads} == {1}
    assert any(fn.api_name == "load_evidence" for fn in loads)


@pytest.mark.slow  # a worker process started and killed: the quick tier stays under 90 s
def test_loads_run_in_a_worker_process_that_a_long_one_does_not_outlive(monkeypatch):
    # An upload's build never holds the interpreter lock of the process serving live runs, and one that runs past
    # LOAD_SECONDS is ended (its process with it) with a message; the next load gets a fresh worker.
    import os
    import time

    worker = loading.run_apart(os.getpid)
    assert worker != os.getpid()
    monkeypatch.setattr(loading, "LOAD_SECONDS", 0.5)
    start = time.monotonic()
    with pytest.raises(ConfigError, match="took longer than 0.5 s and was stopped"):
        loading.run_apart(time.sleep, 60)
    assert time.monotonic() - start < 20
    monkeypatch.setattr(loading, "LOAD_SECONDS", 60.0)
    assert loading.run_apart(os.getpid) not in (os.getpid(), worker)


@pytest.mark.slow
def test_a_large_records_file_loads_in_seconds(tmp_path):
    # 16 methods x 2,000 questions (every per-summary cap at its limit): the pure-Python bootstrap took a minute of
    # CPU here; vectorised, the whole load is a few seconds. The bound is generous (a shared, loaded machine).
    import importlib.util
    import time

    spec = importlib.util.spec_from_file_location("evidence_load_cost", ROOT / "scripts" / "evidence_load_cost.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    path = script.write_records(tmp_path / "records.jsonl", 16, 2000, 6, rounds=2, depth=2)
    start = time.process_time()
    ev = evidence.load_evidence(path)
    assert time.process_time() - start < 30.0
    assert len(ev.methods) == 16 and sum(ev.questions().values()) == 2000


# ---------------------------------------------------------------- a fresh tiny benchmark run


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory):
    """`python -m poss_core.bench` on tiny-random, in this process: two datasets, plain, EAGLE and POSS-2."""
    root = tmp_path_factory.mktemp("evidence")
    data = root / "eval"
    data.mkdir()
    for name, turns in {"chat": [["Say hi."], ["Name a colour."]], "math": [["What is 2 + 2?"]]}.items():
        (data / f"{name}.jsonl").write_text(
            "".join(json.dumps({"question_id": i, "turns": t}) + "\n" for i, t in enumerate(turns))
        )
    out = root / "results" / "tiny"
    rc = cli.main(
        [
            "--preset",
            "tiny-random",
            "--methods",
            "plain,eagle,poss2",
            "--data",
            str(data / "*.jsonl"),
            "--max-new-tokens",
            "10",
            "--runs",
            "2",
            "--tree-budget",
            "8",
            "--warmup-tokens",
            "2",
            "--no-progress",
            "--no-hf-generate",
            "--plotlyjs",
            "cdn",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    return out


def test_benchmark_writes_the_evidence_summary(fresh_run):
    ev = evidence.load_evidence(fresh_run / evidence.FILE_NAME)
    records = [json.loads(line) for line in (fresh_run / "records.jsonl").read_text().splitlines()]
    rounds = sum(1 for r in records if r["method"] == "eagle" for p in r["rounds"]["prefill"] if not p)
    cell = ev.results["eagle"].scopes["overall"]
    assert cell.rounds == rounds and cell.acceptance.hist and sum(cell.acceptance.hist) == rounds
    assert cell.questions == 3 and ev.results["eagle"].scopes["chat"].questions == 2
    assert cell.speedup.runs == 2 and cell.tokens_per_s.mean > 0
    assert ev.meta.command.startswith("python -m poss_core.bench --preset tiny-random")
    assert ev.meta.threads and ev.meta.dtype == "float32" and ev.meta.run_settings["runs"] == 2
    assert ev.meta.hardware and ev.identity.checked > 0 and ev.identity.mismatches == 0


def test_evidence_command_writes_the_same_summary_from_the_folder(fresh_run, tmp_path, capsys):
    out = tmp_path / "assets" / "evidence" / "tiny-random.json"
    assert cli.main(["evidence", str(fresh_run), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    written, by_run = evidence.load_evidence(out), evidence.load_evidence(fresh_run / evidence.FILE_NAME)
    assert written.meta.summary_command.startswith("python -m poss_core.bench evidence ")
    assert written.meta.command == by_run.meta.command
    for name, result in by_run.results.items():  # the same records, the same figures (timings rounded on disk)
        for scope, cell in result.scopes.items():
            again = written.results[name].scopes[scope]
            assert (again.tau, again.acceptance, again.rounds) == (cell.tau, cell.acceptance, cell.rounds)
            assert again.speedup.mean == pytest.approx(cell.speedup.mean, rel=1e-3)
    assert cli.main(["evidence", str(tmp_path)]) == 2  # no records.jsonl: one readable error line
    with pytest.raises(SystemExit) as help_exit:
        cli.main(["evidence", "--help"])
    assert help_exit.value.code == 0


# ---------------------------------------------------------------- the Evidence tab's handlers

OUT = evidence_view.OUTPUT_NAMES


def as_dict(outputs: dict) -> dict:
    """A handler's outputs by name: only the tab's outputs, and only those it changes (the rest keep what they show)."""
    assert set(outputs) <= set(OUT), set(outputs) - set(OUT)
    return outputs


def test_folder_handler_shows_a_fresh_run(fresh_run, monkeypatch):
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, results_dir=fresh_run.parent))
    out = as_dict(evidence_view.folder_handler("tiny"))
    ev = evidence.load_evidence(fresh_run)
    rounds = ev.results["eagle"].scopes["overall"].rounds
    assert "error" not in out["message"], out["message"]
    assert f"EAGLE {rounds}" in out["header"] and "chat 2, math 1" in out["header"]
    assert "python -m poss_core.bench --preset tiny-random" in out["header"]
    assert f"EAGLE n={rounds}" in out["pos_acc"].layout.title.text
    assert f"EAGLE n={rounds}" in out["pos_rate"].layout.title.text
    assert "EAGLE n=2" in out["speedup"].layout.title.text  # two runs
    assert "questions: chat 2, math 1" in out["tau"].layout.title.text
    preset = get_preset("tiny-random")
    assert all(label_of(m, preset) in out["table"] for m in ("plain", "eagle", "poss2"))


def test_folder_handler_reads_only_the_allowed_folders(fresh_run, monkeypatch, tmp_path):
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, results_dir=fresh_run.parent))
    for text in ["/etc", "../../../etc", str(tmp_path), "tiny/../../eval"]:
        out = as_dict(evidence_view.folder_handler(text))
        assert "reads only folders under" in out["message"] and "error" in out["message"], text
        assert not any(hasattr(v, "layout") for v in out.values())  # the charts shown stay as they were
    (tmp_path / "inner").symlink_to(fresh_run)  # a link out of the allowed folder is followed, then refused
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, results_dir=tmp_path))
    out = as_dict(evidence_view.folder_handler("inner"))
    assert "reads only folders under" in out["message"] and not any(hasattr(v, "layout") for v in out.values())
    assert "no such folder" in as_dict(evidence_view.folder_handler("missing"))["message"]


def test_folder_box_reads_only_regular_files_inside_the_allowed_folders(known, monkeypatch, tmp_path, capsys):
    # A link inside an allowed folder to a file elsewhere (here a valid summary, which the box used to show) is
    # refused before it is opened, whichever of the folder's files it is; messages name paths from the allowed
    # folder, never the server's; a 300-character name or a link loop is one message and no traceback in the log.
    allowed, elsewhere = tmp_path / "results", tmp_path / "private"
    allowed.mkdir()
    elsewhere.mkdir()
    secret = evidence.write_evidence(elsewhere / "secret.json", known[1])
    records = elsewhere / "records.jsonl"
    records.write_text("".join(json.dumps(r.to_json()) + "\n" for r in known_records()))
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, results_dir=allowed))
    (allowed / "x").mkdir()
    (allowed / "x" / "evidence.json").symlink_to(secret)
    (allowed / "y").mkdir()
    (allowed / "y" / "records.jsonl").symlink_to(records)
    (allowed / "z").mkdir()
    evidence.write_evidence(allowed / "z" / "other.json", known[1])
    (allowed / "z" / "records.jsonl").write_text((elsewhere / "records.jsonl").read_text())
    (allowed / "z" / "summary.json").symlink_to(secret)
    (allowed / "loop1").symlink_to(allowed / "loop2")
    (allowed / "loop2").symlink_to(allowed / "loop1")
    private = (str(tmp_path), str(loading.project_root()))  # (the message repeats what was typed)
    for text, says in [
        ("x", "results/x/evidence.json is a link to a file outside"),
        ("y", "results/y/records.jsonl is a link to a file outside"),
        ("z", "results/z/summary.json is a link to a file outside"),
        ("x/evidence.json", "reads only folders under"),
        ("loop1", "could not be followed"),
        ("loop1/evidence.json", "could not be followed"),
        ("a" * 300, "longer than 255 characters"),
        ("x/" + "b" * 300, "longer than 255"),
        ("/etc", "reads only folders under"),
        ("missing", "no such folder"),
    ]:
        out = as_dict(evidence_view.folder_handler(text))
        message = out["message"]
        assert says in message and "error" in message, (text, message)
        assert not any(p in message for p in private), message
        assert not any(hasattr(v, "layout") for v in out.values())  # the charts shown stay as they were
    assert "Traceback" not in capsys.readouterr().err
    assert "error" not in as_dict(evidence_view.folder_handler("z/other.json"))["message"]  # a real file still loads


def test_upload_of_a_corrupt_file_says_why_and_keeps_the_charts(tmp_path):
    bad = _write(tmp_path, "evidence.json", "{broken")
    out = as_dict(evidence_view.upload_handler(str(bad)))
    assert "not valid JSON" in out["message"] and "error" in out["message"]
    assert set(out) == {"message"}  # nothing else changes


def test_the_tab_gets_each_handlers_outputs_keyed_by_component():
    # Gradio fills what a handler leaves out with a skip; a handler that changes nothing returns one skip.
    components = {name: object() for name in OUT}
    uploaded = render.by_component(evidence_view.upload_handler, components)
    assert uploaded.__name__ == "upload_handler" and uploaded(None) == gr.skip()
    out = uploaded("notes.txt")
    assert list(out) == [components["message"]] and "error" in out[components["message"]]


def test_bundled_summary_or_the_command_that_makes_it(known, tmp_path, monkeypatch):
    monkeypatch.setenv("POSS_EVIDENCE_DIR", str(tmp_path))
    out = as_dict(evidence_view.bundled_handler(DEFAULT_PRESET))  # no file yet
    assert "python scripts/benchmark.py paper --evidence" in out["message"]
    assert out["header"] == "" and "No evidence summary loaded" in wording.unwrapped(
        out["tau"].layout.annotations[0].text
    )
    evidence.write_evidence(tmp_path / "tiny-random.json", known[1])
    out = as_dict(evidence_view.bundled_handler("tiny-random"))
    assert "bundled summary for tiny-random" in out["message"] and "EAGLE 12" in out["header"]
    assert "error" in as_dict(evidence_view.bundled_handler("../etc/passwd"))["message"]


@pytest.mark.parametrize("path", sorted((ROOT / "assets" / "evidence").glob("*.json")), ids=lambda p: p.name)
def test_committed_evidence_summaries_load(path):
    ev = evidence.load_evidence(path)
    assert ev.preset == path.stem.removesuffix("-demo") and ev.meta.command and ev.meta.hardware and ev.meta.date


def test_dataset_picker_redraws_the_scoped_charts_on_one_dataset(fresh_run, monkeypatch):
    monkeypatch.setattr(limits, "LIMITS", replace(limits.LIMITS, results_dir=fresh_run.parent))
    out = as_dict(evidence_view.folder_handler("tiny"))
    ev = out["shown"]
    assert isinstance(ev, evidence.Evidence) and out["scope"]["value"] == "overall"
    assert [c[1] for c in out["scope"]["choices"]] == ["overall", *ev.datasets]
    charts = evidence_view.scope_handler(ev, "math")
    assert tuple(charts) == evidence_view.SCOPED
    rounds = ev.results["eagle"].scopes["math"].rounds
    assert rounds < ev.results["eagle"].scopes["overall"].rounds  # one dataset: fewer rounds than all
    assert f"EAGLE n={rounds}" in charts["pos_acc"].layout.title.text
    assert all("dataset: math" in charts[name].layout.title.text for name in evidence_view.SCOPED)
    skipped = evidence_view.scope_handler(ev, "../etc")  # a scope the summary does not have changes nothing
    assert not any(hasattr(v, "layout") for v in skipped.values())
    assert not any(hasattr(v, "layout") for v in evidence_view.scope_handler(None, "math").values())


def test_html_report_draws_tau_and_speedup_as_the_evidence_tab_does(fresh_run):
    page = (fresh_run / "report.html").read_text()
    ev = evidence.load_evidence(fresh_run)
    rounds = ev.results["eagle"].scopes["overall"].rounds
    assert "<h3>τ per dataset</h3>" in page and "<h3>Speed-up over plain decoding</h3>" in page
    assert "95% bootstrap over questions" in page and "mean ± std over runs" in page
    assert f"EAGLE n={rounds}" in page


def test_records_of_a_method_whose_draft_is_not_observed_load(known):
    """Prompt lookup's nodes carry no score or draft probability: records.jsonl stores null there."""
    from dataclasses import replace as _replace

    from poss_core.base.json_safe import clean_json
    from poss_core.rounds.events import DraftNode

    rec = next(r for r in known_records() if r.method == "eagle")
    blind = [
        _replace(
            e,
            nodes=[DraftNode(n.token, n.parent, n.depth, math.nan, math.nan, n.specialist) for n in e.nodes],
            draft_observed=False,
        )
        for e in rec.events
    ]
    line = json.dumps(clean_json(_replace(rec, method="pld", events=blind).to_json()))
    assert "null" in line
    (back,) = evidence.parse_records(line, "records.jsonl")
    assert back.method == "pld" and [e.accept_len for e in back.events] == [e.accept_len for e in rec.events]
    assert all(math.isnan(n.score) for e in back.events for n in e.nodes)


def test_changes_over_the_hass_control_and_the_unbiased_deviations_are_in_the_summary():
    """With a hass lane, every other draft gets its τ change over hass (paired bootstrap), and every cell keeps the
    deviation along the continuation and on tree nodes by position, under the names outside tools read."""
    from dataclasses import replace

    records = known_records()
    hass = [replace(r, method="hass") for r in records if r.method == "eagle"]  # the same rounds as EAGLE's
    ev = evidence.build_evidence(records + hass, {"preset": "tiny-random"}, DEPTH)
    res = ev["results"]
    assert res["eagle"]["tau_vs_hass"]["value"] == pytest.approx(0.0)  # identical rounds: no change
    assert res["eagle"]["tau_vs_hass"]["low"] == pytest.approx(0.0)
    assert res["poss2"]["tau_vs_hass"] == res["poss2"]["tau_vs_eagle"]
    assert "tau_vs_hass" not in res["hass"] and "tau_vs_hass" not in res["plain"]
    cell = res["eagle"]["scopes"]["overall"]
    assert set(cell["deviation"]) == {"every_position", "continuation", "tree_on_path", "tree_off_path"}
    acc = cell["acceptance"]
    assert sum(map(sum, acc["by_drafted"])) == sum(acc["hist"])
    assert all(p["drafted_share"] == pytest.approx(1.0) for p in acc["positions"])
    back = evidence.Evidence.model_validate(ev)
    assert back.results["poss2"].tau_vs_hass.estimate().value == pytest.approx(res["poss2"]["tau_vs_eagle"]["value"])


def test_a_version_1_summary_still_loads_and_counts_every_round_as_drafting_its_deepest_position(known, tmp_path):
    _, ev = known
    old = json.loads(json.dumps(ev))
    old["version"] = 1
    for result in old["results"].values():
        for cell in result["scopes"].values():
            cell.pop("deviation")
            cell["acceptance"].pop("by_drafted")
            for p in cell["acceptance"]["positions"]:
                p.pop("drafted_share")
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(old))
    stats = evidence.load_evidence(path).acceptance()["EAGLE"]
    assert stats.by_drafted is None
    # From the histogram alone, every round drafting the deepest position: P(accept_len >= k) / P(accept_len >= k-1).
    at_least = [sum(stats.hist[k:]) for k in range(len(stats.hist))]
    from_hist = [at_least[k] / at_least[k - 1] if at_least[k - 1] else math.nan for k in range(1, len(stats.hist))]
    assert stats.rates(True) == pytest.approx(from_hist, nan_ok=True)
    assert stats.deviation_of("continuation")["count"] == []


def test_drafting_time_per_round_is_in_the_summary_and_the_evidence_table(known):
    """Each cell keeps the run's drafting ms per round (what more specialists cost), the Evidence tab's table shows it
    for drafts only, and a summary written before it loads with none."""
    from app.views.evidence_html import table_html

    records, ev = known
    table = analysis.aggregate(records, DEPTH)["table"]
    for m in ("eagle", "poss2", "plain"):
        kept = ev["results"][m]["scopes"]["d1"]["draft_ms"]
        assert kept["mean"] == pytest.approx(table[m]["d1"]["draft_ms"]) and kept["runs"] == 2
    assert ev["results"]["eagle"]["scopes"]["d1"]["draft_ms"]["mean"] > 0
    assert ev["results"]["plain"]["scopes"]["d1"]["draft_ms"]["mean"] == 0
    shown = table_html(evidence.Evidence.model_validate(ev))
    assert "drafting ms/round" in shown
    eagle_ms = ev["results"]["eagle"]["scopes"]["overall"]["draft_ms"]
    assert f"{eagle_ms['mean']:.1f} ± {eagle_ms['std']:.1f}" in shown
    old = json.loads(json.dumps(ev))
    for result in old["results"].values():
        for cell in result["scopes"].values():
            cell.pop("draft_ms")
    back = evidence.Evidence.model_validate(old)
    assert back.results["eagle"].scopes["overall"].draft_ms is None and "drafting ms/round" in table_html(back)
    untimed = json.loads(json.dumps(ev))  # prompt lookup: its n-gram search is not timed apart, so 0 is no figure
    untimed["results"]["eagle"]["scopes"]["overall"]["draft_ms"].update(mean=0.0, std=0.0)
    assert "<td>–</td>" in table_html(evidence.Evidence.model_validate(untimed))
