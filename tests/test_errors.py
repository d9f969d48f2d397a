"""Bad input gets a clear error before any model work; the CLI exits non-zero with one line."""

import pytest
from helpers import run_main

from poss_core.base.errors import CheckpointError, ConfigError, PromptError
from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder, SpeculativeDecoder, encode_prompt
from poss_core.generate import main as generate_main
from poss_core.models.loading import random_draft
from poss_core.models.tiny import tiny_target


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("top_k", 0, "top_k=0"),
        ("depth", 0, "depth=0"),
        ("tree_budget", 1, "tree_budget=1"),
        ("temperature", -0.5, "temperature=-0.5"),
        ("top_p", 0.0, "top_p=0.0"),
        ("top_p", 1.5, "top_p=1.5"),
        ("max_new_tokens", 0, "max_new_tokens=0"),
        ("depth_stop", 1.0, "depth_stop=1.0"),
        ("head_rows", "some", "head_rows='some': use one of read, all"),
    ],
)
def test_config_errors_name_the_value_and_range(field, value, needle):
    with pytest.raises(ConfigError) as err:
        DecodeConfig(**{field: value})
    assert needle in str(err.value) and "use" in str(err.value)


def test_prompt_over_the_context_window_is_refused(tiny_target):
    ids = list(range(5, 50)) * 20  # 900 tokens against a 512-token window
    with pytest.raises(PromptError, match="900 tokens.*512"):
        list(PlainDecoder(tiny_target, DecodeConfig()).generate(ids))
    with pytest.raises(PromptError, match="empty"):
        encode_prompt(tiny_target.tokenizer, "   ")


def test_draft_for_another_target_is_refused(tiny_target):
    other = tiny_target_of_size(hidden=96)
    draft = random_draft(other, "poss2")
    with pytest.raises(CheckpointError, match="hidden size is 96 but the target's is 64"):
        SpeculativeDecoder(tiny_target, draft, DecodeConfig())
    small_vocab = tiny_target_of_size(vocab=60)
    with pytest.raises(CheckpointError, match="vocabulary has 60 tokens but the target's has"):
        SpeculativeDecoder(tiny_target, random_draft(small_vocab, "eagle"), DecodeConfig())


def tiny_target_of_size(hidden=64, vocab=None):
    return tiny_target(seed=9, hidden_size=hidden, vocab_size=vocab)


def cli(*args):
    return run_main(generate_main, args)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--preset", "tiny-random", "--draft", "poss2", "--prompt", "hi", "--top-k", "0"], "top_k=0"),
        (["--preset", "tiny-random", "--draft", "/no/such/draft", "--prompt", "hi"], "/no/such/draft"),
        (["--preset", "no-such-preset", "--prompt", "hi"], "no-such-preset"),
        (["--preset", "tiny-random", "--method", "plain", "--prompt", "  "], "empty"),
        (
            ["--target", "/no/such/model", "--method", "plain", "--prompt", "hi", "--quantization", "none"],
            "/no/such/model",
        ),
        # A device that is not on this machine is refused, never replaced by the CPU (cuda:99 exists nowhere).
        (
            ["--preset", "tiny-random", "--method", "plain", "--prompt", "hi", "--device", "cuda:99"],
            "device 'cuda:99' is not available on this machine: use one of cpu",
        ),
        (
            ["--preset", "tiny-random", "--method", "plain", "--prompt", "hi", "--device", "gpu0"],
            "device 'gpu0' is not a device name",
        ),
    ],
)
def test_cli_bad_input_is_one_line(args, needle):
    r = cli(*args)
    assert r.returncode != 0
    lines = [line for line in r.stderr.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0]
    assert "Traceback" not in r.stderr


def _sharded_target(tmp_path, weight_map):
    """The tiny target saved in shards, its index's weight map replaced by `weight_map`."""
    import json

    folder = tmp_path / "sharded"
    target = tiny_target(seed=3)
    target.model.save_pretrained(folder, max_shard_size="200KB")
    target.tokenizer.save_pretrained(folder)
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    assert len(set(data["weight_map"].values())) > 1  # really sharded
    data["weight_map"] = weight_map(data["weight_map"])
    index.write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("weight_map", [lambda m: [list(kv) for kv in m.items()], lambda m: {k: 3 for k in m}])
def test_a_malformed_shard_index_is_one_line(tmp_path, weight_map):
    # A list-shaped weight map (or one of numbers) used to reach transformers and end as a bare AttributeError.
    folder = _sharded_target(tmp_path, weight_map)
    r = cli("--target", str(folder), "--method", "plain", "--prompt", "hi", "--quantization", "none")
    lines = [line for line in r.stderr.strip().splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "model.safetensors.index.json is not a valid shard index" in lines[0] and "weight_map" in lines[0]


def test_a_draft_whose_shard_index_is_a_list_is_refused(tmp_path):
    from poss_core.models.checkpoint import read_weights

    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": [["fc.weight", "a.safetensors"]]}')
    with pytest.raises(CheckpointError, match="not a valid shard index.*found list"):
        read_weights(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="not a valid shard index.*found list"):
        read_weights(tmp_path)


@pytest.mark.parametrize("summary", ["{}", "", "[]", '{"meta": {}, "depth": "six"}'])
def test_bench_report_on_an_empty_or_foreign_summary_is_one_line(tmp_path, summary):
    from poss_core.bench import cli as bench_cli

    (tmp_path / "summary.json").write_text(summary)
    (tmp_path / "records.jsonl").write_text("")
    r = run_main(bench_cli.main, ["report", str(tmp_path)])
    lines = [line for line in r.stderr.strip().splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "summary.json is not a benchmark summary" in lines[0] and "python -m poss_core.bench" in lines[0]
    (tmp_path / "summary.json").unlink()
    assert "summary.json does not exist" in run_main(bench_cli.main, ["report", str(tmp_path)]).stderr
