"""The import picture flows one way: folders are the layers, and a module imports only from its own layer or below.
The engine (`poss_core`) never imports gradio or the app; plotly only in
the views' figure modules; the app and the benchmark are siblings (neither imports the other)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Bottom to top: every folder is one layer. A module belongs to its folder, and imports only from its own folder or
# a folder below it; a folder missing from this list fails `test_every_folder_is_a_layer`.
LAYERS = [
    "poss_core/base",  # errors, paths, JSON safety, the settings' declarations: imports nothing of the project
    "poss_core/rounds",  # RoundEvent and everything computed or said of rounds
    "poss_core/models",  # target, draft, checkpoints, presets, loading
    "poss_core/decoding",  # trees, verification, the speculative decoder
    "poss_core/autobudget",  # the tree budget fitted to this machine
    "poss_core/runtime",  # methods, models kept loaded, a run's settings, the race of lanes, saved runs
    "poss_core/views",  # what the app and the benchmark both draw
    "poss_core/results",  # what a benchmark run leaves: records, tables, the evidence summary
    "poss_core/bench",
    "poss_core/training",
    "poss_core/deploy",  # stages the app, engine and drafts for a Space
    "poss_core",  # the package and `python -m poss_core.generate`
    "app/server",  # the server's limits and defences, knowing nothing of the page
    "app/sessions",  # what the app remembers: tabs, pools, recordings, measured speeds, a visitor's settings
    "app/views",  # what the page draws
    "app/actions",  # what the buttons and the API do
    "app/page",  # the tabs' assembly, serving and launch
    "app",  # the package
    ".",  # app.py
]

PLOTLY_ALLOWED = {"poss_core.views.figures", "poss_core.views.draft_tree"}


def folder_of(module: str) -> str:
    """The folder a module's file sits in, relative to the project root ("." for app.py)."""
    path = MODULES[module].relative_to(ROOT)
    return path.parent.as_posix() if path.parent.parts else "."


def layer_of(module: str) -> int | None:
    folder = folder_of(module) if module in MODULES else None
    return LAYERS.index(folder) if folder in LAYERS else None


def project_modules() -> dict[str, Path]:
    out = {"app_entry": ROOT / "app.py"}
    for top in ("poss_core", "app"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = project_modules()


def imports_of(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file, nested ones included, relative ones resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{base_name}.{alias.name}"
                found.append((sub if sub in MODULES else base_name, node.lineno))
    return found


def test_every_folder_is_a_layer():
    assert sorted({folder_of(m) for m in MODULES if layer_of(m) is None}) == []


def test_an_import_from_a_folder_above_fails_and_one_from_below_passes():
    """The check itself: a server module importing the page, or rounds importing the decoder, is caught."""
    assert upward("app.server.limits", [("app.page.launch", 3)]) == [
        "line 3: app.page.launch (app/page is above app/server)"
    ]
    assert upward("poss_core.rounds.events", [("poss_core.decoding.decoder", 9)]) != []
    assert upward("app.page.ui", [("app.server.limits", 1), ("app.page.layout", 2), ("poss_core.base.errors", 3)]) == []


def upward(module: str, imports: list[tuple[str, int]]) -> list[str]:
    """The imports of `module` that reach into a folder above its own."""
    mine = layer_of(module)
    return [
        f"line {line}: {name} ({LAYERS[layer_of(name)]} is above {LAYERS[mine]})"
        for name, line in imports
        if layer_of(name) is not None and layer_of(name) > mine
    ]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_from_a_folder_above_its_own(module):
    assert upward(module, imports_of(module, MODULES[module])) == [], f"{module} imports upward"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("poss_core")))
def test_the_engine_never_imports_gradio_or_the_app_and_plotly_only_for_figures(module):
    tops = {name.split(".")[0]: line for name, line in imports_of(module, MODULES[module])}
    assert "gradio" not in tops and "app" not in tops and "spaces" not in tops
    if module not in PLOTLY_ALLOWED:
        assert "plotly" not in tops


@pytest.mark.slow  # a fresh interpreter importing torch and transformers: the quick tier stays under 90 s
def test_importing_the_whole_engine_loads_neither_gradio_nor_the_app():
    engine = [m for m in MODULES if m.startswith("poss_core") and not m.endswith("__main__")]
    code = (
        "import importlib, sys\n"
        f"for m in {engine!r}:\n    importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('gradio', 'app'))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m == "app_entry" or m.startswith("app")))
def test_the_app_is_a_sibling_of_the_benchmark_and_never_imports_it(module):
    """What both draw lives in poss_core.views and poss_core.results; the benchmark is a command line beside the app."""
    bench = [
        f"line {line}: {name}"
        for name, line in imports_of(module, MODULES[module])
        if name == "poss_core.bench" or name.startswith("poss_core.bench.")
    ]
    assert bench == [], f"{module} imports the benchmark: {bench}"
