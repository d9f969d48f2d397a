"""Drafts in the Hub's model layout: sharded weights load like one file, and the model card's metadata."""

import json
import re

import pytest
import torch
import yaml

from poss_core.base.errors import CheckpointError
from poss_core.base.paths import assets_dir
from poss_core.deploy.hub_drafts import export_hub, model_card
from poss_core.deploy.hub_files import HUB_FILE_LIMIT, SpaceError
from poss_core.deploy.space import main
from poss_core.models.checkpoint import load_draft, read_weights, save_draft
from poss_core.models.loading import random_draft

BUNDLED = assets_dir() / "drafts" / "smollm2-135m"


def front_matter(text: str) -> dict:
    m = re.match(r"^---\n(.*?)\n---\n", text, re.DOTALL)
    assert m, "no YAML front matter"
    return yaml.safe_load(m.group(1))


@pytest.fixture
def single_and_sharded(tmp_path, tiny_target):
    single = save_draft(random_draft(tiny_target, "poss2"), tmp_path / "single", tiny_target)
    files = export_hub(single, tmp_path / "sharded", max_shard_size="40KB", base_model="org/tiny-target")
    return single, tmp_path / "sharded", files


def test_sharded_draft_loads_like_the_single_file(single_and_sharded, tiny_target):
    single, sharded, files = single_and_sharded
    shards = sorted(p.name for p in sharded.glob("model-*.safetensors"))
    assert len(shards) > 1 and not (sharded / "model.safetensors").exists()
    assert shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards) and index["metadata"]["total_size"] > 0
    a, b = load_draft(single, tiny_target), load_draft(sharded, tiny_target)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.meta == b.meta and {f.path for f in files} >= {"config.json", "poss_draft.json", "README.md"}


def test_a_missing_shard_is_named(single_and_sharded, tiny_target):
    _, sharded, _ = single_and_sharded
    (sharded / f"model-00002-of-{len(list(sharded.glob('model-*'))):05d}.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"names shard 'model-00002-of-\d+\.safetensors', which is not a file"):
        load_draft(sharded, tiny_target)


def test_bundled_draft_exports_in_shards_under_10_mb(tmp_path):
    out = tmp_path / "poss2"
    assert main(["export-hub", str(BUNDLED / "poss2"), str(out), "--max-shard-size", "9MB"]) == 0
    assert all(p.stat().st_size < HUB_FILE_LIMIT for p in out.iterdir())
    want, got = read_weights(BUNDLED / "poss2"), read_weights(out)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


@pytest.mark.parametrize("name", ["eagle", "poss2", "matched"])
def test_model_card_has_valid_hub_metadata(name):
    meta = front_matter(model_card(BUNDLED / name))
    assert {"library_name", "base_model", "tags", "license", "datasets"} <= meta.keys()
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and meta["license"] == "apache-2.0"
    assert "speculative-decoding" in meta["tags"] and meta["datasets"]
    label = json.loads((BUNDLED / name / "model_card.json").read_text())["label"]
    assert f"# {label}" in model_card(BUNDLED / name)


def test_model_card_needs_a_base_model_for_an_unknown_target(tmp_path, tiny_target):
    folder = save_draft(random_draft(tiny_target, "eagle"), tmp_path / "d", tiny_target)
    with pytest.raises(SpaceError, match="--base-model"):
        model_card(folder)
    assert front_matter(model_card(folder, base_model="org/tiny", license="mit"))["license"] == "mit"
