"""The import picture flows one way: folders are the layers, and a module imports only from its own layer or below.
The engine (`poss_core`) never imports gradio or the app; plotly only in
the views' figures module; the app and the benchmark are siblings (neither imports the other)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Bottom to top; a module belongs to the longest prefix that names it.
LAYERS = [
    ["poss_core", "poss_core.errors", "poss_core.json_safe", "poss_core.paths"],
    ["poss_core.events", "poss_core.settings", "poss_core.call_budget"],
    [
        "poss_core.metrics",
        "poss_core.prompt_files",
        "poss_core.explain",
        "poss_core.token_records",
        "poss_core.held_memory",
    ],
    ["poss_core.models"],
    ["poss_core.decoding"],
    ["poss_core.autobudget"],
    ["poss_core.methods", "poss_core.model_cache"],
    ["poss_core.run_spec"],  # a comparison's settings, checked and resolved once
    ["poss_core.compare", "poss_core.saved_runs"],
    ["poss_core.views"],  # what the app and the benchmark both draw
    ["poss_core.results"],  # what a benchmark run leaves: records, tables, the evidence summary
    ["poss_core.bench", "poss_core.generate"],
    ["poss_core.training"],
    ["poss_core.deploy"],  # stages the app, engine and drafts for a Space
    [
        "app",
        "app.demo.about",
        "app.demo.tab_pools",
        "app.demo.user_settings",
        "app.demo.control_defaults",
        "app.sessions.state",
        "app.server.live_queue",
        "app.server.client_share",
        "app.server.class_pool",
        "app.demo.recordings",
    ],
    ["app.demo.token_html", "app.demo.chart_view"],
    ["app.demo.render"],
    [
        "app.server.calls",
        "app.demo.handlers",
        "app.demo.view_handlers",
        "app.sessions.saved_files",
        "app.server.api",
        "app.evidence.evidence_view",
    ],
    ["app.demo.controls", "app.server.serving"],
    ["app.demo.layout", "app.demo.wiring"],  # the Demo tab's parts and events
    ["app.ui"],
    ["app.server.launch"],
    ["app_entry"],  # app.py
]
PLOTLY_ALLOWED = {"poss_core.views.figures"}


def layer_of(module: str) -> int | None:
    best, found = -1, None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, found = len(name), i
    return found


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


def test_every_module_is_in_a_layer():
    assert [m for m in MODULES if layer_of(m) is None] == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_from_a_layer_above_it(module):
    mine = layer_of(module)
    above = [
        f"line {line}: {name} ({LAYERS[layer_of(name)][0]} is above {LAYERS[mine][0]})"
        for name, line in imports_of(module, MODULES[module])
        if layer_of(name) is not None and layer_of(name) > mine
    ]
    assert above == [], f"{module} imports upward: {above}"


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
