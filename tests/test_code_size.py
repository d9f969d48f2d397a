"""No module over 500 lines and no function over 80 in the engine, the app and the scripts: a reader follows each one
top to bottom. A function counts from its `def` to its last line, docstring included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULE_LINES, FUNCTION_LINES = 500, 80
FILES = sorted(p for top in ("poss_core", "app", "scripts") for p in (ROOT / top).rglob("*.py"))


def long_functions(source: str) -> list[tuple[str, int]]:
    """(name, lines) of every function or method longer than FUNCTION_LINES."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > FUNCTION_LINES
    ]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_500_lines_and_no_function_over_80(path):
    source = path.read_text(encoding="utf-8")
    assert source.count("\n") <= MODULE_LINES, f"{path.name}: {source.count(chr(10))} lines"
    assert long_functions(source) == []


def test_the_check_catches_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    assert long_functions(f"def short():\n    return 1\n\n\ndef long():\n{body}\n") == [("long", FUNCTION_LINES + 1)]
