"""Loading results on a public server: the folders a visitor may read results from (symlinks and `..` resolved
first), and the worker process that builds a summary apart from the process serving live runs."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..base.errors import ConfigError
from ..base.paths import project_root
from .evidence import Evidence, load_evidence

# The folder a visitor may read besides the project's results/: the app's `--results-dir DIR`, or this.
RESULTS_ENV = "POSS_RESULTS_DIR"
NAME_MAX = 255  # the longest name one part of a path may have (Linux, macOS): longer is refused before any lookup
# A build is Python work bounded by evidence.MAX_ROUNDS (seconds of one core); one still running after this is ended.
LOAD_SECONDS = 60.0


# ---------------------------------------------------------------- which folders may be read


def results_roots(extra: Path | None = None) -> list[Path]:
    """The folders a typed path may read from: `extra` (else $POSS_RESULTS_DIR), then the project's results/."""
    extra = extra or (Path(os.environ[RESULTS_ENV]) if os.environ.get(RESULTS_ENV) else None)
    return [p.resolve() for p in ([extra] if extra else []) + [project_root() / "results"]]


def resolve_results_path(text: Any, roots: list[Path]) -> Path:
    """A typed results folder (or summary file) inside one of `roots`, symlinks and `..` resolved first; anything
    else raises ConfigError saying what may be read, naming folders from the project (never the server's absolute
    paths)."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("type a results folder, e.g. results/paper.")
    text = text.strip()
    if len(text) > 1000 or "\x00" in text:
        raise ConfigError("that is not a folder path.")
    given = Path(text)
    if any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX for part in given.parts):
        raise ConfigError(f"a part of that path is longer than {NAME_MAX} characters: no folder has such a name.")
    candidates = [given] if given.is_absolute() else [project_root() / given] + [root / given for root in roots]
    try:
        resolved = [(c, c.resolve()) for c in candidates]  # symlinks and `..` resolved before the check
        allowed = [r for _, r in resolved if any(r.is_relative_to(root) for root in roots)]
        found = next((r for r in allowed if r.exists()), None)
        outside = any(c.exists() for c, _ in resolved)
    except (OSError, RuntimeError) as err:  # a link loop (RuntimeError), a name the system refuses
        raise ConfigError(
            f"that path could not be followed ({type(err).__name__}: a link loop or a name the system refuses)."
        ) from None
    if found is not None:
        return found
    if not allowed or outside:
        raise ConfigError(
            f"this app reads only folders under {_roots_text(roots)} (a public app must not read "
            f"other files on its server); copy the folder there, or start the app with --results-dir "
            f"DIR."
        )
    raise ConfigError(f"no such folder under {_roots_text(roots)}.")


def _roots_text(roots: list[Path]) -> str:
    """The allowed folders as a user knows them: relative to the project, else the --results-dir folder's name."""

    def shown(root: Path) -> str:
        if root.is_relative_to(project_root().resolve()):
            return f"{root.relative_to(project_root().resolve())}/"
        return f"the --results-dir folder ({root.name}/)"

    return " or ".join(shown(r) for r in roots)


def load_results_path(text: Any, roots: list[Path]) -> Evidence:
    """The summary of a typed results folder or file, built in the worker process: every file it reads is a regular
    file inside `roots` (a link in the folder to a file elsewhere is refused too)."""
    return load_apart(resolve_results_path(text, roots), roots=roots)


# ---------------------------------------------------------------- loads in a worker process

_LOADER: Any = None  # multiprocessing Pool of one process, started by the first load
_LOADER_LOCK = threading.Lock()


def _loader() -> Any:
    """The worker pool: forked from a server process that imported the loader once (the first load waits seconds for
    it, later ones a fraction of a second), one process, renewed after every load (a build's memory goes back when it
    ends). As multiprocessing does, a worker runs the entry script again as `__mp_main__`: app.py launches only under
    `if __name__ == "__main__"`."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
            ctx = multiprocessing.get_context(method)
            if method == "forkserver":
                ctx.set_forkserver_preload(["poss_core.results.evidence"])
            _LOADER = ctx.Pool(processes=1, maxtasksperchild=1)
        return _LOADER


def _end_loader() -> None:
    """End the worker (and the load in it); the next load starts a fresh one."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is not None:
            _LOADER.terminate()
            _LOADER = None


atexit.register(_end_loader)


def run_apart(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in the worker process, its exceptions raised here; ended with a ConfigError after LOAD_SECONDS, so
    its Python work never holds the interpreter lock of the process serving live runs."""
    job = _loader().apply_async(fn, args)
    try:
        return job.get(timeout=LOAD_SECONDS)
    except multiprocessing.TimeoutError:
        _end_loader()
        raise ConfigError(
            f"building the summary took longer than {LOAD_SECONDS:g} s and was stopped: summarise "
            f"the results with `python -m poss_core.bench evidence FOLDER --out FILE` and load that "
            f"file."
        ) from None


def load_apart(path: Path, roots: list[Path] | None = None) -> Evidence:
    """`load_evidence(path, roots)` in the worker process."""
    return run_apart(load_evidence, path, roots)
