"""The results tables in README.md and docs/results.md are what scripts/doc_tables.py renders from the committed
evidence summaries and model cards: a figure copied by hand, or left behind by a new summary, fails here."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "scripts" / "doc_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_tables_match_the_evidence():
    tool = _tool()
    names = {m.group("name") for f in tool.DOCS for m in tool.MARKER.finditer(f.read_text())}
    assert set(tool.TABLES) <= names  # every table is placed somewhere
    assert tool.main(["--check"]) == 0, "run python scripts/doc_tables.py"


def test_render_replaces_only_what_is_between_the_markers():
    tool = _tool()
    text = "before\n<!-- table:tau -->\nold table\n<!-- /table:tau -->\nafter <!-- table:x --> kept\n"
    out = tool.render(text, {"tau": "| new |"})
    assert out == "before\n<!-- table:tau -->\n| new |\n<!-- /table:tau -->\nafter <!-- table:x --> kept\n"
