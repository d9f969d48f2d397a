"""Bad input gets a clear error before any model work; the CLI exits non-zero with one line."""

import pytest
from helpers import run_main

from poss_core.decoding.config import DecodeConfig
from poss_core.decoding.decoder import PlainDecoder, SpeculativeDecoder, encode_prompt
from poss_core.errors import CheckpointError, ConfigError, PromptError
from poss_core.generate import main as generate_main
from poss_core.models.loading import random_draft
from poss_core.models.tiny import tiny_target

@pytest.mark.parametrize("field,value,needle", [
    ("top_k", 0, "top_k=0"), ("depth", 0, "depth=0"), ("tree_budget", 1, "tree_budget=1"),
    ("temperature", -0.5, "temperature=-0.5"), ("top_p", 0.0, "top_p=0.0"), ("top_p", 1.5, "top_p=1.5"),
    ("max_new_tokens", 0, "max_new_tokens=0"), ("depth_stop", 1.0, "depth_stop=1.0"), ("head_rows", "some", "head_rows='some'"),
])
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


@pytest.mark.parametrize("args,needle", [
    (["--preset", "tiny-random", "--draft", "poss2", "--prompt", "hi", "--top-k", "0"], "top_k=0"),
    (["--preset", "tiny-random", "--draft", "/no/such/draft", "--prompt", "hi"], "/no/such/draft"),
    (["--preset", "no-such-preset", "--prompt", "hi"], "no-such-preset"),
    (["--preset", "tiny-random", "--method", "ar", "--prompt", "  "], "empty"),
    (["--target", "/no/such/model", "--method", "ar", "--prompt", "hi", "--quantization", "none"], "/no/such/model"),
])
def test_cli_bad_input_is_one_line(args, needle):
    r = cli(*args)
    assert r.returncode != 0
    lines = [line for line in r.stderr.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0]
    assert "Traceback" not in r.stderr
