"""Recipes and the compact token-id files: the committed recipe is consistent, a tiny recipe runs end to end, and
the real recipe's data and training commands start and make progress (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from poss_core.base.errors import ConfigError, PossError
from poss_core.training.recipe import main as recipe_main
from poss_core.training.recipe_cards import card_lineage, lineage
from poss_core.training.recipe_file import load_recipe
from poss_core.training.recipe_run import export_dir, train_command
from poss_core.training.shards import pack_token_ids, read_token_ids

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "drafts" / "smollm2-135m.toml"
BUNDLED_STEPS = 35_900  # every bundled draft's card says so
HASS_STEPS = BUNDLED_STEPS + 800  # hass and POSS-1: the bundled EAGLE layer, then POSS-2's 300 + 500 unrolled steps


def lineage_steps(recipe, method: str) -> int:
    """Optimizer steps behind `method`'s last step: follow init (the same method) and specialists_from (the EAGLE
    layer) back to a fresh start, by step name."""
    by_name = {s.name: s for s in recipe.steps}
    step, who, total = [s for s in recipe.steps if method in s.methods][-1], method, 0
    while step is not None:
        assert who in step.methods, (step.name, who)
        total += step.steps
        if step.specialists_from:
            who = "eagle"
        ref = step.init or step.specialists_from
        step = by_name[ref] if ref else None
    return total


def test_committed_recipe_resolves_and_gives_every_bundled_draft_its_steps():
    recipe = load_recipe(RECIPE)
    bundled = sorted(p.name for p in (ROOT / recipe.bundle).iterdir() if (p / "config.json").is_file())
    assert bundled == ["eagle", "hass", "matched", "poss1", "poss2", "poss3"]
    for method in bundled:
        assert lineage_steps(recipe, method) == (HASS_STEPS if method in ("hass", "poss1") else BUNDLED_STEPS), method
        card = json.loads((ROOT / recipe.bundle / method / "model_card.json").read_text())
        last = [s for s in recipe.steps if method in s.methods][-1]
        assert (last.steps, last.flags.get("batch_seed")) == (card["steps"], card["batch_seed"])
        measured = card["heldout_top1_by_position_decoding"]
        assert measured is not None and len(measured) == 6, method  # top-1 at each draft position 1..6
        assert card["lineage"] == card_lineage(recipe, method, measured=bool(measured)), "run recipe cards --write"
        assert card["lineage"]["total_steps"] == lineage_steps(recipe, method)
    ancestors = {s.name for m in bundled for s, _ in lineage(recipe, m)}
    assert ancestors == {s.name for s in recipe.steps}, "a step no bundled draft descends from"
    for d in recipe.data:  # every committed token file is there and readable
        if d.tokens:
            assert read_token_ids(ROOT / d.tokens), d.name
    assert {d.name for d in recipe.data if d.heldout} == {"smollm2-135m-selfeval", "smollm2-135m-longeval"}
    trained_on = {n for s in recipe.steps for n in s.data}
    assert not trained_on & {d.name for d in recipe.data if d.heldout}, "a held-out slice is trained on"


def test_pack_and_read_token_ids_round_trip(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    shards = {0: [[1, 5, 6, 2], [1, 7, 2]], 3: [[1, 9, 9, 9, 2]]}
    for i, rows in shards.items():
        (tokens / f"tokens-{i:05d}.json").write_text(json.dumps({"input_ids": rows, "prompt_lens": [2] * len(rows)}))
    info = pack_token_ids(tokens, tmp_path / "ids.npz", card={"seed": 7})
    assert info == {"shards": 2, "rows": 3, "tokens": 12}
    back = read_token_ids(tmp_path / "ids.npz")
    assert [(s.index, s.input_ids, s.prompt_lens) for s in back] == [(0, shards[0], [2, 2]), (3, shards[3], [2])]
    with np.load(tmp_path / "ids.npz", allow_pickle=False) as z:
        assert json.loads(str(z["card"])) == {"seed": 7}  # the folder's data card travels with its ids


def test_damaged_token_id_files_are_refused(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(PossError, match="not a token id file"):
        read_token_ids(tmp_path / "junk.npz")
    np.savez(
        tmp_path / "short.npz",
        input_ids=np.arange(3, dtype=np.int32),
        row_lens=np.array([5], np.int32),
        prompt_lens=np.array([1], np.int32),
        shard_index=np.array([0], np.int32),
        shard_rows=np.array([1], np.int32),
    )
    with pytest.raises(PossError, match="do not add up"):
        read_token_ids(tmp_path / "short.npz")
    with pytest.raises(PossError, match="does not exist"):
        read_token_ids(tmp_path / "missing.npz")


@pytest.mark.parametrize(
    "body, message",
    [
        ('[[step]]\nname="s"\nmethods=["eagle"]\ndata=["nope"]\nsteps=1\n', "not a \\[\\[data\\]\\]"),
        (
            '[[data]]\nname="d"\nargs=["--prompts","x"]\n[[step]]\nname="s"\nmethods=["eagle"]\n'
            'data=["d"]\nsteps=1\ninit="s"\n',
            "no earlier step",
        ),
        (
            '[[data]]\nname="d"\nargs=["--prompts","x"]\n[[step]]\nname="s"\nmethods=["eagle"]\n'
            'data=["d"]\nsteps=1\ninit="t"\n[[step]]\nname="t"\nmethods=["eagle"]\ndata=["d"]\nsteps=1\n',
            "no earlier step",
        ),
        (
            '[[data]]\nname="d"\nargs=["--prompts","x"]\n[[step]]\nname="s"\nmethods=["poss2"]\ndata=["d"]\nsteps=1\n'
            '[[step]]\nname="t"\nmethods=["poss2"]\ndata=["d"]\nsteps=1\nspecialists_from="s"\n',
            "does not train eagle",
        ),
        ('[[data]]\nname="d"\nargs=["--prompts","x"]\n[[stage]]\nname="stage-1"\n', "'stage' is not part of a recipe"),
        ('[train]\nout="x"\n', "sets out"),
        ('[[data]]\nname="d"\n', "neither tokens nor args"),
        ("this is = = not toml", "not valid TOML"),
    ],
)
def test_bad_recipes_say_what_is_wrong(tmp_path, body, message):
    path = tmp_path / "r.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_recipe(path)


def test_step_commands_resolve_their_starting_drafts():
    recipe = load_recipe(RECIPE)
    runs = Path("runs/x")
    poss = recipe.step("poss2-unroll-300")
    cmd = train_command(recipe, runs, poss, "poss2", max_steps=3)
    assert cmd[cmd.index("--specialists-from") + 1] == str(export_dir(runs, "teacher-forced-greedy-self-3"))
    assert cmd[cmd.index("--steps") + 1] == "3" and cmd[cmd.index("--final-eval") + 1] == "none"
    assert cmd[cmd.index("--export") + 1] == str(runs / "poss2-unroll-300" / "export")


TINY_RECIPE = """
preset = "tiny-random"
data_root = "{root}/data"
runs = "{root}/runs"
[train]
tokens_per_batch = 64
draft_vocab = 0
save_every = 1
threads = 1
final_eval = "none"
[[data]]
name = "ids"
tokens = "{root}/ids.npz"
[[data]]
name = "held"
tokens = "{root}/ids.npz"
heldout = true
[[step]]
name = "eagle-start"
methods = ["eagle"]
data = ["ids"]
steps = 2
[[step]]
name = "eagle-more"
methods = ["eagle"]
data = ["ids"]
steps = 2
init = "eagle-start"
[[step]]
name = "poss2-from-eagle"
methods = ["poss2"]
data = ["ids"]
steps = 1
specialists_from = "eagle-more"
unroll = "decoding"
"""


@pytest.mark.slow
def test_a_tiny_recipe_builds_its_data_trains_three_steps_and_scores_the_drafts(tmp_path, capsys):
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    rng = np.random.default_rng(0)
    rows = [[1] + rng.integers(5, 60, size=n).tolist() + [2] for n in (20, 30, 25, 18)]
    (tokens / "tokens-00000.json").write_text(json.dumps({"input_ids": rows, "prompt_lens": [6] * 4}))
    pack_token_ids(tokens, tmp_path / "ids.npz")
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_RECIPE.format(root=tmp_path))
    assert recipe_main(["data", "--config", str(config)]) == 0
    assert (tmp_path / "data" / "ids" / "shard-00000.safetensors").is_file()
    assert recipe_main(["train", "--config", str(config)]) == 0
    drafts = tmp_path / "runs" / "poss2-from-eagle" / "drafts"
    assert sorted(p.name for p in drafts.iterdir()) == ["eagle", "poss2"]
    card = json.loads((drafts / "poss2" / "model_card.json").read_text())
    assert card["steps"] == 1 and "eagle-more/export" in card["init"]
    eagle = json.loads((drafts / "eagle" / "model_card.json").read_text())
    assert "eagle-start/export" in eagle["init"]
    capsys.readouterr()
    assert recipe_main(["train", "--config", str(config)]) == 0  # a rerun finds every step done
    assert capsys.readouterr().out.count(": done (") == 3
    out = tmp_path / "heldout"
    assert (
        recipe_main(
            [
                "heldout",
                "--config",
                str(config),
                "--drafts",
                str(drafts),
                "--methods",
                "eagle,poss2",
                "--threads",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads((out / "held.json").read_text())
    assert [r["method"] for r in report["results"]] == ["eagle", "poss2"]
    assert "| held (4) |" in capsys.readouterr().out


def test_train_refuses_to_start_without_its_data(tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_RECIPE.format(root=tmp_path))
    assert recipe_main(["train", "--config", str(config)]) == 2
    assert "recipe data" in capsys.readouterr().err


@pytest.mark.slow
def test_the_committed_recipe_rebuilds_data_and_trains_from_a_fresh_start(tmp_path):
    """On the real default target: the data command rebuilds the first step's folders (one shard each) and the
    training command starts the first step and takes optimizer steps, as on a fresh clone."""
    recipe = load_recipe(RECIPE)
    text = RECIPE.read_text().replace('data_root = "data"', f'data_root = "{tmp_path}/data"')
    config = tmp_path / "recipe.toml"
    config.write_text(text.replace(f'runs = "{recipe.runs}"', f'runs = "{tmp_path}/runs"'))
    first = recipe.steps[0]
    run = [sys.executable, "-m", "poss_core.training.recipe"]
    subprocess.run(
        run + ["data", "--config", str(config), "--only", *first.data, "--max-shards", "1"],
        cwd=ROOT,
        check=True,
        timeout=900,
    )
    for name in first.data:
        assert len(list((tmp_path / "data" / name).glob("shard-*.safetensors"))) == 1, name
    done = subprocess.run(
        run + ["train", "--config", str(config), "--until", first.name, "--max-steps", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    drafts = tmp_path / "runs-max-steps-2" / first.name / "drafts"
    assert sorted(p.name for p in drafts.iterdir()) == sorted(first.methods)
    log = (tmp_path / "runs-max-steps-2" / first.name / "run" / "eagle" / "loss_log.jsonl").read_text()
    assert len(log.splitlines()) == 2


def test_until_names_a_step(tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_RECIPE.format(root=tmp_path))
    assert recipe_main(["train", "--config", str(config), "--until", "eagle-more", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "eagle-start eagle" in out and "eagle-more eagle" in out and "poss2-from-eagle" not in out
    assert recipe_main(["train", "--config", str(config), "--until", "stage-2", "--dry-run"]) == 2
    assert "no step named 'stage-2'" in capsys.readouterr().err
