"""Every third-party package that poss_core/, app/ or app.py imports is pinned in requirements.txt (and so in
pyproject.toml: tests/test_space.py checks the two agree), found by walking every import with `ast`."""

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWN = {"poss_core", "app", "__future__"}
# Imported only inside `try: ... except ImportError`, so the code runs without them; each with why it is not pinned.
OPTIONAL = {
    "spaces": "ZeroGPU's decorator: only a ZeroGPU Space has it (app/page/launch.py, app/page/ui.py); in "
    "requirements-dev.txt",
}


def _sources() -> list[Path]:
    return [ROOT / "app.py", *sorted((ROOT / "poss_core").rglob("*.py")), *sorted((ROOT / "app").rglob("*.py"))]


def _guarded(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside a `try` whose handlers catch ImportError (or ModuleNotFoundError)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        names = set()
        for h in node.handlers:
            kinds = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
            names |= {k.id for k in kinds if isinstance(k, ast.Name)}
        if names & {"ImportError", "ModuleNotFoundError"}:
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return out


def third_party_imports() -> dict[str, dict[str, list[str]]]:
    """Top-level module -> {"guarded"|"plain": [files]} for every import that is neither stdlib nor the project's."""
    found: dict[str, dict[str, list[str]]] = {}
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        guarded = _guarded(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top in sys.stdlib_module_names or top in OWN:
                    continue
                kind = "guarded" if id(node) in guarded else "plain"
                found.setdefault(top, {}).setdefault(kind, []).append(str(path.relative_to(ROOT)))
    return found


def _normal(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): PyYAML == pyyaml, huggingface_hub == huggingface-hub."""
    return re.sub(r"[-_.]+", "-", name).lower()


def required_names(requirements_text: str) -> set[str]:
    """The distribution names the lines of a requirements file name (comments and blank lines skipped)."""
    names = set()
    for line in requirements_text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(_normal(re.split(r"[\s\[<>=!~;@]", line, maxsplit=1)[0]))
    return names


def unprovided(requirements_text: str) -> list[str]:
    """One line per imported third-party module that no requirement provides, naming the module, its distribution
    and the files that import it; optional (guarded, listed in OPTIONAL) modules are let through."""
    required = required_names(requirements_text)
    dists = importlib.metadata.packages_distributions()
    problems = []
    for module, where in sorted(third_party_imports().items()):
        if module in OPTIONAL and "plain" not in where:
            continue
        provided_by = dists.get(module, [])
        if not any(_normal(d) in required for d in provided_by):
            files = sorted(set(where.get("plain", []) + where.get("guarded", [])))
            dist = " or ".join(sorted(set(provided_by))) or "no installed distribution"
            problems.append(f"{module} (from {dist}), imported by {', '.join(files[:3])}")
    return problems


def test_every_imported_package_is_pinned_in_requirements():
    problems = unprovided((ROOT / "requirements.txt").read_text(encoding="utf-8"))
    assert not problems, "imported but not in requirements.txt: " + "; ".join(problems)


def test_dropping_a_requirement_line_is_caught_naming_the_module():
    text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    without = "\n".join(line for line in text.splitlines() if not line.lower().startswith("pydantic"))
    assert without != text
    problems = unprovided(without)
    assert len(problems) == 1 and problems[0].startswith("pydantic (from pydantic), imported by "), problems
    assert "poss_core/results/evidence.py" in problems[0] or "poss_core/runtime/saved_runs.py" in problems[0]
    yaml = unprovided(text.replace("PyYAML==", "# PyYAML=="))  # a distribution named apart from its module
    assert [p.split(" ")[0] for p in yaml] == ["yaml"]


def test_optional_imports_are_guarded_and_every_pin_is_exact():
    imports = third_party_imports()
    for module in OPTIONAL:
        assert "plain" not in imports.get(module, {}), f"{module} is imported outside try/except ImportError"
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        assert not line or "==" in line or line.startswith("numpy"), f"{line!r} is not pinned to a version"
