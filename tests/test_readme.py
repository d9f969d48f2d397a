"""The front page stays one screen's reading: its size, its two commands (the test one is what CI runs) and links
that lead somewhere."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_BYTES = 9 * 1024


def test_the_readme_fits_one_screens_reading():
    size = len(README.read_bytes())
    assert size <= MAX_BYTES, f"README.md is {size} bytes; move reference material to docs/ (at most {MAX_BYTES})"


def test_the_readme_test_command_is_what_ci_runs():
    text = README.read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", text, re.S)
    demo, tests = blocks[0], blocks[1]
    assert demo.rstrip().endswith("python app.py")
    ci = (ROOT / ".ci" / "run").read_text()
    for step in tests.split(" && "):
        assert step.strip() in ci, f"the README's test step {step!r} is not in .ci/run"


def test_every_relative_link_in_the_readme_exists():
    text = README.read_text()
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
