"""Every piece of code the docs name exists: in a backticked span of README.md or a doc under docs/, a path
(`poss_core/rounds/events.py`, `scripts/server_check.py`, `poss_core/autobudget/`), a script or module file by its name
(`server_check.py`), and a dotted name (`compare.start`, `handlers.run_handler(...)`, `views.pooling.pool_events`,
`RunSpec.resolve`) whose first part is a project module (by its dotted path or its last parts) or a project class.
Names are read from the source with `ast`: a module's own definitions count (a package's imports too: they are what
it offers), a class's methods, fields and `self.` attributes, its project bases' included. A name a module only
imports is not where the code is, so `compare.RunSpec` fails where `run_spec.RunSpec` passes."""

from __future__ import annotations

import ast
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("app", "poss_core", "scripts")
SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"\b((?:app|poss_core|scripts|tests)(?:/[\w.-]+)*(?:\.py|\.sh|/))(?![\w/])")
FILE = re.compile(r"(?<![\w/.])(\w+\.(?:py|sh))\b")
DOTTED = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
# File names in prose whose stem is also a module's name (`config.json` is a draft's file, not poss_core's config).
DATA_SUFFIXES = {"json", "jsonl", "gz", "md", "toml", "npz", "txt", "html", "csv", "safetensors", "css", "yaml", "pt"}


@dataclass
class Module:
    """What one source file defines: its top-level names and, per class, the attributes and bases."""

    names: set[str] = field(default_factory=set)
    classes: dict[str, tuple[set[str], list[str]]] = field(default_factory=dict)
    package: bool = False


def read_module(path: Path) -> Module:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    mod = Module(package=path.name == "__init__.py")
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mod.names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            mod.names.add(node.name)
            mod.classes[node.name] = (class_attributes(node), [ast.unparse(b).split(".")[-1] for b in node.bases])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            mod.names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and mod.package:
            mod.names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):  # names defined under a guard
            for sub in ast.walk(node):
                if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                    mod.names.add(sub.name)
    return mod


def class_attributes(node: ast.ClassDef) -> set[str]:
    """A class's methods, class-level and annotated names (dataclass fields), and what its methods set on `self`."""
    found = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(item.name)
        elif isinstance(item, ast.Assign):
            found |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            found.add(item.target.id)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
            if isinstance(sub.ctx, ast.Store):
                found.add(sub.attr)
    return found


@dataclass
class Project:
    """Every module of app/, poss_core/ and scripts/ by dotted name, and every class by its name."""

    root: Path
    modules: dict[str, Module] = field(default_factory=dict, repr=False)
    files: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def read(cls, root: Path) -> Project:
        project = cls(root)
        for top in CODE_DIRS:
            for path in sorted((root / top).rglob("*.py")) + sorted((root / top).rglob("*.sh")):
                if "/." in str(path.relative_to(root)):
                    continue
                project.files.add(path.name)
                if path.suffix == ".py":
                    parts = list(path.relative_to(root).with_suffix("").parts)
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    project.modules[".".join(parts)] = read_module(path)
        project.files |= {p.name for p in root.glob("*.py")}
        return project

    def modules_named(self, dotted: str) -> list[str]:
        """The modules `dotted` may stand for: its full dotted name, or the last parts of one (`views.pooling`)."""
        return [m for m in self.modules if m == dotted or m.endswith("." + dotted)]

    def classes_named(self, name: str) -> list[tuple[str, str]]:
        return [(m, name) for m, mod in self.modules.items() if name in mod.classes]

    def class_has(self, module: str, name: str, attr: str, seen: frozenset = frozenset()) -> bool:
        """Whether the class (or a project base of it) has `attr`; a class with a base outside the project
        (`dict`, a torch module) may have anything."""
        attrs, bases = self.modules[module].classes[name]
        if attr in attrs:
            return True
        for base in bases:
            if base in ("object", "Protocol") or base in seen:
                continue
            found = self.classes_named(base)
            if not found:
                return True
            if any(self.class_has(m, base, attr, seen | {name}) for m, _ in found):
                return True
        return False

    def resolves(self, dotted: str) -> bool | None:
        """True when `dotted` names existing code, False when it names a project module or class without that
        name, None when it names neither (a variable, another library)."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest run of parts that names a module
            candidates = self.modules_named(".".join(parts[:cut]))
            if candidates:
                return any(self._has(m, parts[cut:]) for m in candidates)
        classes = self.classes_named(parts[0])
        if classes and len(parts) >= 2:
            return any(self.class_has(m, parts[0], parts[1]) for m, _ in classes)
        return None

    def _has(self, module: str, rest: list[str]) -> bool:
        if not rest:
            return True
        mod = self.modules[module]
        if rest[0] not in mod.names:
            return False
        if rest[0] in mod.classes and len(rest) > 1:
            return self.class_has(module, rest[0], rest[1])
        return True  # a function, a constant or an instance: what follows is not read from the source


def stale_names(text: str, project: Project) -> list[str]:
    """The names in `text`'s backticked spans that do not exist in `project`, each once, in order."""
    stale: list[str] = []
    for span in SPAN.findall(text):
        for path in PATH.findall(span):
            if not (project.root / path).exists():
                stale.append(path)
        span_without_paths = PATH.sub(" ", span)
        for name in FILE.findall(span_without_paths):
            if name not in project.files:
                stale.append(name)
        for dotted in DOTTED.findall(FILE.sub(" ", span_without_paths)):
            if dotted.rsplit(".", 1)[-1] in DATA_SUFFIXES:
                continue
            if project.resolves(dotted) is False:
                stale.append(dotted)
    return list(dict.fromkeys(stale))


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


@pytest.fixture(scope="module")
def project() -> Project:
    return Project.read(ROOT)


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: p.name)
def test_every_name_a_doc_gives_exists(doc, project):
    assert stale_names(doc.read_text(encoding="utf-8"), project) == [], f"{doc.name} names code that is not there"


def test_the_check_reads_each_form_of_name(project):
    text = (
        "`compare.start(run)`, `poss_core/runtime/run_spec.py`, `views.pooling.pool_events`, `RunSpec.resolve`, "
        "`server_check.py`, `python -m poss_core.bench report DIR`, `poss_core/autobudget/`, a draft's `config.json`, "
        "`lane.events`, `torch.cuda.synchronize`"
    )
    assert stale_names(text, project) == []
    text = (
        "`compare.begin(run)`, `poss_core/run_specs.py`, `views.pooling.pool_all`, `RunSpec.check`, "
        "`server_checks.py`, `compare.RunSpec`, `poss_core/autobudgets/`"
    )
    assert stale_names(text, project) == [
        "compare.begin",
        "poss_core/run_specs.py",
        "views.pooling.pool_all",
        "RunSpec.check",
        "server_checks.py",
        "compare.RunSpec",
        "poss_core/autobudgets/",
    ]


def test_a_renamed_function_fails_the_check(tmp_path):
    """A doc names a function; once the function is renamed in the source, the check names the doc's stale name."""
    package = tmp_path / "poss_core"
    package.mkdir()
    (package / "__init__.py").write_text("")
    module = package / "compare.py"
    shutil.copy(ROOT / "poss_core" / "runtime" / "compare.py", module)
    doc = "The API ends a call with `compare.run_to_end(comparison)` and `Comparison.drain`."
    assert stale_names(doc, Project.read(tmp_path)) == []
    source = module.read_text()
    module.write_text(source.replace("def run_to_end(", "def run_until_done(").replace("def drain(", "def flush("))
    assert stale_names(doc, Project.read(tmp_path)) == ["compare.run_to_end", "Comparison.drain"]
