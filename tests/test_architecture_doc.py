"""docs/architecture.md lists every module and script, one line each, and nothing that is gone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LISTED = re.compile(r"^((?:poss_core|app|scripts)/\S+|app\.py)\s", re.M)


def listed_files() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Files, layer by layer", 1)[1].split("\n## ", 1)[0]
    return set(LISTED.findall(section))


def project_files() -> set[str]:
    tracked = subprocess.run(
        ["git", "ls-files", "poss_core", "app", "scripts", "app.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = {str(p.relative_to(ROOT)) for top in ("poss_core", "app") for p in (ROOT / top).rglob("*.py")}
    found |= {str(p.relative_to(ROOT)) for p in (ROOT / "scripts").glob("*") if p.suffix in (".py", ".sh")}
    return {
        f
        for f in set(tracked) | found | {"app.py"}
        if not f.endswith("__init__.py") and "/." not in f and (f.endswith(".py") or f.endswith(".sh"))
    }


def test_every_module_and_script_is_in_the_architecture_doc():
    assert sorted(project_files() - listed_files()) == []


def test_the_architecture_doc_lists_no_file_that_is_gone():
    assert sorted(listed_files() - project_files()) == []
