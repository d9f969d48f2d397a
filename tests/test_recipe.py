"""Recipes and the compact token-id files: the committed recipe is consistent, a tiny recipe runs end to end, and
the real recipe's data and training commands start and make progress (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from poss_core.errors import ConfigError, PossError
from poss_core.training.data import pack_token_ids, read_token_ids, token_ids_card
from poss_core.training.recipe import load_recipe, main as recipe_main, resolve, train_command

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "drafts" / "smollm2-135m.toml"
BUNDLED_STEPS = 35_900  # every bundled draft's card says so
HASS_STEPS = BUNDLED_STEPS + 800  # the hass control: the bundled EAGLE layer, then POSS-2's 300 + 500 unrolled steps


def lineage_steps(recipe, method: str) -> int:
    """Optimizer steps behind `method` in the recipe's last stage: walk init references back to a fresh start."""
    def steps_into(stage_i: int, method: str, ref_phase=None) -> int:
        for i in range(stage_i, -1, -1):
            stage = recipe.stages[i]
            phases = [p for p in stage.phases if method in p.methods]
            if ref_phase is not None:
                phases = [p for p in phases if p.key == ref_phase]
                ref_phase = None
            if not phases:
                continue
            phase = phases[-1]
            return phase.steps + steps_from(i, phase, method)
        raise AssertionError(f"{method} is never trained")

    def steps_from(stage_i: int, phase, method: str) -> int:
        ref, who = (phase.init, method) if phase.init else (phase.specialists_from, "eagle")
        if not ref:
            return 0
        if ref == "previous":
            return steps_into(stage_i - 1, who)
        if ref == "bundled":  # the committed drafts: what the recipe's stages before this one made
            return steps_into(stage_i - 1, who)
        if "/" in ref:
            return steps_into(recipe.stage_index(ref.split("/")[0]), who, ref_phase=ref)
        return steps_into(recipe.stage_index(ref), who)

    return steps_into(len(recipe.stages) - 1, method)


def test_committed_recipe_resolves_and_gives_every_bundled_draft_its_steps():
    recipe = load_recipe(RECIPE)
    bundled = sorted(p.name for p in (ROOT / recipe.bundle).iterdir() if (p / "config.json").is_file())
    assert bundled == ["eagle", "hass", "matched", "poss2", "poss3"]
    for method in bundled:
        assert lineage_steps(recipe, method) == (HASS_STEPS if method == "hass" else BUNDLED_STEPS), method
        card = json.loads((ROOT / recipe.bundle / method / "model_card.json").read_text())
        last = [p for s in recipe.stages for p in s.phases if method in p.methods][-1]
        assert (last.steps, last.flags.get("batch_seed")) == (card["steps"], card["batch_seed"])
    for d in recipe.data:  # every committed token file is there and readable
        if d.tokens:
            assert read_token_ids(ROOT / d.tokens), d.name
    assert {d.name for d in recipe.data if d.heldout} == {"smollm2-135m-selfeval", "smollm2-135m-longeval"}
    trained_on = {n for s in recipe.stages for p in s.phases for n in p.data}
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
    assert token_ids_card(tmp_path / "ids.npz") == {"seed": 7}


def test_damaged_token_id_files_are_refused(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(PossError, match="not a token id file"):
        read_token_ids(tmp_path / "junk.npz")
    np.savez(tmp_path / "short.npz", input_ids=np.arange(3, dtype=np.int32), row_lens=np.array([5], np.int32),
             prompt_lens=np.array([1], np.int32), shard_index=np.array([0], np.int32),
             shard_rows=np.array([1], np.int32))
    with pytest.raises(PossError, match="do not add up"):
        read_token_ids(tmp_path / "short.npz")
    with pytest.raises(PossError, match="does not exist"):
        read_token_ids(tmp_path / "missing.npz")


@pytest.mark.parametrize("body, message", [
    ('[[stage]]\nname="s"\n[[stage.phase]]\nmethods=["eagle"]\ndata=["nope"]\nsteps=1\n', "not a \\[\\[data\\]\\]"),
    ('[[data]]\nname="d"\nargs=["--prompts","x"]\n[[stage]]\nname="s"\n[[stage.phase]]\nmethods=["eagle"]\n'
     'data=["d"]\nsteps=1\ninit="previous"\n', "first stage"),
    ('[[data]]\nname="d"\nargs=["--prompts","x"]\n[[stage]]\nname="s"\n[[stage.phase]]\nmethods=["eagle"]\n'
     'data=["d"]\nsteps=1\ninit="t"\n[[stage]]\nname="t"\n[[stage.phase]]\nmethods=["eagle"]\ndata=["d"]\nsteps=1\n',
     "not earlier"),
    ('[train]\nout="x"\n', "sets out"),
    ('[[data]]\nname="d"\n', "neither tokens nor args"),
    ('this is = = not toml', "not valid TOML"),
])
def test_bad_recipes_say_what_is_wrong(tmp_path, body, message):
    path = tmp_path / "r.toml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_recipe(path)


def test_phase_commands_resolve_their_starting_drafts():
    recipe = load_recipe(RECIPE)
    runs = Path("runs/x")
    i = recipe.stage_index("stage-14")
    poss = next(p for p in recipe.stages[i].phases if "poss2" in p.methods)
    cmd = train_command(recipe, runs, i, poss, "poss2", max_steps=3)
    assert cmd[cmd.index("--specialists-from") + 1] == str(resolve(recipe, runs, i, "stage-13/a"))
    assert cmd[cmd.index("--steps") + 1] == "3" and cmd[cmd.index("--final-eval") + 1] == "none"
    assert cmd[cmd.index("--export") + 1] == str(runs / "stage-14" / poss.name / "export")


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
[[stage]]
name = "stage-1"
[[stage.phase]]
name = "a"
methods = ["eagle"]
data = ["ids"]
steps = 2
[[stage]]
name = "stage-2"
[[stage.phase]]
name = "a"
methods = ["eagle"]
data = ["ids"]
steps = 2
init = "previous"
[[stage.phase]]
name = "b"
methods = ["poss2"]
data = ["ids"]
steps = 1
specialists_from = "stage-2/a"
unroll = "decoding"
"""


@pytest.mark.slow
def test_a_tiny_recipe_builds_its_data_trains_two_stages_and_scores_the_drafts(tmp_path, capsys):
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
    drafts = tmp_path / "runs" / "stage-2" / "drafts"
    assert sorted(p.name for p in drafts.iterdir()) == ["eagle", "poss2"]
    card = json.loads((drafts / "poss2" / "model_card.json").read_text())
    assert card["steps"] == 1 and "stage-2/a/export" in card["init"]
    eagle = json.loads((drafts / "eagle" / "model_card.json").read_text())
    assert "stage-1/drafts" in eagle["init"]
    capsys.readouterr()
    assert recipe_main(["train", "--config", str(config)]) == 0  # a rerun finds every stage done
    assert capsys.readouterr().out.count(": done (") == 2
    out = tmp_path / "heldout"
    assert recipe_main(["heldout", "--config", str(config), "--drafts", str(drafts), "--methods", "eagle,poss2",
                        "--threads", "1", "--out", str(out)]) == 0
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
    """On the real default target: the data command rebuilds the first stage's folders (one shard each) and the
    training command starts stage 1 and takes steps, as on a fresh clone."""
    recipe = load_recipe(RECIPE)
    text = RECIPE.read_text().replace('data_root = "data"', f'data_root = "{tmp_path}/data"')
    config = tmp_path / "recipe.toml"
    config.write_text(text.replace(f'runs = "{recipe.runs}"', f'runs = "{tmp_path}/runs"'))
    stage1 = recipe.stages[0].phases[0].data
    run = [sys.executable, "-m", "poss_core.training.recipe"]
    subprocess.run(run + ["data", "--config", str(config), "--only", *stage1, "--max-shards", "1"], cwd=ROOT,
                   check=True, timeout=900)
    for name in stage1:
        assert len(list((tmp_path / "data" / name).glob("shard-*.safetensors"))) == 1, name
    done = subprocess.run(run + ["train", "--config", str(config), "--until", "stage-1", "--max-steps", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    drafts = tmp_path / "runs-max-steps-2" / "stage-1" / "drafts"
    assert sorted(p.name for p in drafts.iterdir()) == sorted(recipe.stages[0].phases[0].methods)
    log = (tmp_path / "runs-max-steps-2" / "stage-1" / "a" / "run" / "eagle" / "loss_log.jsonl").read_text()
    assert len(log.splitlines()) == 2
