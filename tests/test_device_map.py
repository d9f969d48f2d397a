"""A target larger than one device: spread by accelerate's device map (here the CPU and disk offload, split by
max_memory), the LM head kept on the main device with the draft, and greedy speculative decoding still identical."""

from __future__ import annotations

import pytest
import torch
from helpers import greedy_reference

from poss_core.base.errors import ConfigError
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import SpeculativeDecoder, encode_prompt
from poss_core.models.loading import load_preset_target, parse_max_memory, random_draft
from poss_core.models.tiny import tiny_target


@pytest.fixture(scope="module")
def saved_target(tmp_path_factory):
    target = tiny_target(seed=3, layers=4)
    folder = tmp_path_factory.mktemp("tiny-target")
    target.model.save_pretrained(folder)
    target.tokenizer.save_pretrained(folder)
    return target, folder


def test_a_target_split_by_max_memory_decodes_identically(saved_target):
    target, folder = saved_target
    size = sum(p.numel() * p.element_size() for p in target.model.parameters())
    split = load_preset_target(
        str(folder),
        quantization="auto",
        device="cpu",
        device_map="auto",
        max_memory={"cpu": size // 2},
        dtype=torch.float32,
    )
    placed = split.model.hf_device_map
    assert "disk" in placed.values() and "cpu" in placed.values()  # really split
    assert placed["lm_head"] == "cpu" and split.quantization == "none"
    ids = encode_prompt(split.tokenizer, "Tell me a story about the sea.")
    cfg = DecodeConfig(depth=4, top_k=3, tree_budget=10, max_new_tokens=24)
    out = list(SpeculativeDecoder(split, random_draft(split, "poss2", depth=4), cfg).generate(ids))[-1]
    assert out.token_ids == greedy_reference(target, ids, 24)


def test_max_memory_text_and_unknown_maps_are_checked(saved_target):
    assert parse_max_memory("0:20GiB, 1:20GiB,cpu:60GiB") == {0: "20GiB", 1: "20GiB", "cpu": "60GiB"}
    with pytest.raises(ConfigError, match="DEVICE:AMOUNT"):
        parse_max_memory("cpu=1GB")
    with pytest.raises(ConfigError, match="device map 'balanced'"):
        load_preset_target(str(saved_target[1]), quantization="none", device="cpu", device_map="balanced")
