"""Where the bundled files live: a checkout's `assets/`, the copy a wheel installs, or $POSS_ASSETS_DIR."""

from __future__ import annotations

import os
from pathlib import Path

# In a checkout this is the repository root; in an installed wheel it is site-packages, where pyproject.toml ships
# assets/ next to poss_core/ and app/, so the same relative path holds in both layouts.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def assets_dir() -> Path:
    """$POSS_ASSETS_DIR if set (a folder with drafts/, examples/ and app.css), else the bundled assets/."""
    return Path(os.environ.get("POSS_ASSETS_DIR") or PROJECT_ROOT / "assets")


def project_root() -> Path:
    """The folder holding app.py, poss_core/ and assets/ (a source checkout; an install has no app.py)."""
    return PROJECT_ROOT
