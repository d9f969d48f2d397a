"""Deploy the demo to a Hugging Face Space from a staged snapshot, and export drafts in the Hub's model layout.

    python -m poss_core.deploy.space stage OUT_DIR                    # what a Space needs, listed: no token, no network
    python -m poss_core.deploy.space deploy --repo OWNER/NAME [--hardware cpu-upgrade] [--private]
    python -m poss_core.deploy.space card DRAFT_DIR [--out README.md] # a draft's Hub model card
    python -m poss_core.deploy.space export-hub DRAFT_DIR OUT_DIR [--max-shard-size 9MB]  # a model repo, shards < 10 MB

A Space (like every Hub repo) refuses a file over 10 MB pushed with plain git, and this repository's history holds
earlier drafts, so the demo goes up as a snapshot through `HfApi.upload_folder`, which sends large and binary files
through LFS/Xet itself and never sends git history. The same staged folder is what makes `gradio deploy` safe (it
uploads the whole current folder).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..base.errors import run_cli
from ..base.paths import project_root
from .hub_drafts import DEFAULT_SHARD_SIZE, export_hub, model_card, write_model_card
from .hub_files import SpaceError, StagedFile, format_listing, list_files

SKIP_NAMES = {"__pycache__", ".pytest_cache", ".ipynb_checkpoints", ".DS_Store"}
SKIP_SUFFIXES = {".pyc", ".pyo", ".egg-info"}


# ---------------------------------------------------------------------------------------------------------- staging


def gradio_pin(requirements: Path) -> str | None:
    """The exact gradio version requirements.txt pins (`gradio==X`), or None."""
    for line in requirements.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\s*gradio\s*==\s*([\w.+-]+)", line.split("#", 1)[0])
        if m:
            return m.group(1)
    return None


def front_matter(readme: Path) -> dict[str, Any]:
    """The README's YAML front matter (the Space's configuration)."""
    import yaml

    text = readme.read_text(encoding="utf-8")
    m = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, re.DOTALL)
    if not m:
        raise SpaceError(f"{readme} has no YAML front matter (--- ... ---): a Space reads its sdk and app_file there.")
    try:
        data = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as err:
        raise SpaceError(f"{readme}'s front matter is not valid YAML ({str(err).splitlines()[0]}).") from err
    if not isinstance(data, dict):
        raise SpaceError(f"{readme}'s front matter is not a mapping of keys to values.")
    return data


def check_space_config(root: Path) -> dict[str, Any]:
    """The README front matter a Gradio Space needs, checked against requirements.txt's gradio pin."""
    meta = front_matter(root / "README.md")
    if meta.get("sdk") != "gradio":
        raise SpaceError(
            f"README.md front matter has sdk: {meta.get('sdk')!r}; the demo is a Gradio Space (sdk: gradio)."
        )
    app_file = meta.get("app_file")
    if app_file != "app.py" or not (root / "app.py").is_file():
        raise SpaceError(
            f"README.md front matter has app_file: {app_file!r}; it must be app.py, the demo's entry point."
        )
    pin = gradio_pin(root / "requirements.txt")
    version = str(meta.get("sdk_version", ""))
    if pin is None:
        raise SpaceError("requirements.txt does not pin gradio (gradio==X.Y.Z): the Space's sdk_version needs it.")
    if version != pin:
        raise SpaceError(
            f"README.md front matter has sdk_version: {version or '(none)'} but requirements.txt pins "
            f"gradio=={pin}: make them agree (the Space installs sdk_version's gradio)."
        )
    return meta


def _skipped(path: Path) -> bool:
    return any(part in SKIP_NAMES or part.startswith(".") or Path(part).suffix in SKIP_SUFFIXES for part in path.parts)


def space_manifest(root: Path) -> list[tuple[Path, str]]:
    """(source, path in the Space) for every file the Space needs; nothing else from the checkout goes up."""
    pairs: list[tuple[Path, str]] = []

    def add(src: Path) -> None:
        pairs.append((src, src.relative_to(root).as_posix()))

    for name in ("app.py", "requirements.txt", "README.md", "packages.txt", "assets/app.css"):
        if (root / name).is_file():
            add(root / name)
    if "assets/demo.png" in (root / "README.md").read_text(encoding="utf-8") and (root / "assets/demo.png").is_file():
        add(root / "assets/demo.png")
    for folder in ("app", "poss_core", "assets/examples", "assets/recordings", "assets/drafts", "assets/evidence"):
        for f in sorted((root / folder).rglob("*")):
            if f.is_file() and not _skipped(f.relative_to(root)):
                add(f)
    return pairs


def stage(out_dir: str | os.PathLike, root: str | os.PathLike | None = None) -> list[StagedFile]:
    """Write the Space's snapshot into `out_dir` (new or empty) and return its files, marking those that go through
    LFS/Xet. Each bundled draft gets its Hub model card (README.md). No token, no network."""
    root = Path(root or project_root())
    for need in ("app.py", "README.md", "requirements.txt", "app", "poss_core", "assets/drafts"):
        if not (root / need).exists():
            raise SpaceError(
                f"{root} has no {need}: stage from a source checkout of the project (an installed "
                f"package does not carry the app)."
            )
    check_space_config(root)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SpaceError(f"{out} exists and is not an empty folder: stage into a new folder.")
    staged_dirs = [root.resolve() / name for name in ("app", "poss_core", "assets")]
    if out.resolve() == root.resolve() or any(d == out.resolve() or d in out.resolve().parents for d in staged_dirs):
        raise SpaceError(f"{out} is inside a folder being staged: choose a folder outside app/, poss_core/, assets/.")
    out.mkdir(parents=True, exist_ok=True)
    for src, rel in space_manifest(root):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out / rel)
    for config in sorted((out / "assets" / "drafts").rglob("config.json")):
        write_model_card(config.parent)
    return list_files(out)


# --------------------------------------------------------------------------------------------------------- deploying


def hardware_choices() -> list[str]:
    from huggingface_hub import SpaceHardware

    return [h.value for h in SpaceHardware]


def resolve_token(token: str | None = None) -> str:
    """$HF_TOKEN, else the user's `hf auth login` token; a clear error (before any network) when neither exists."""
    from huggingface_hub import get_token

    token = token or os.environ.get("HF_TOKEN") or get_token()
    if not token:
        raise SpaceError(
            "no Hugging Face token: set HF_TOKEN (a write token from https://huggingface.co/settings/"
            "tokens) or run `hf auth login` first."
        )
    return token


def _git_revision(root: Path) -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        return rev.stdout.strip() if rev.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def deploy(
    repo: str,
    hardware: str | None = None,
    private: bool = False,
    token: str | None = None,
    root: str | os.PathLike | None = None,
    api=None,
) -> str:
    """Create (or reuse) the Gradio Space `repo`, upload a fresh staged snapshot so it mirrors it, and request
    `hardware` when given. Returns the Space's URL."""
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*", repo or ""):
        raise SpaceError(f"--repo {repo!r} is not OWNER/NAME (e.g. your-name/poss-vs-eagle).")
    if hardware is not None and hardware not in hardware_choices():
        raise SpaceError(f"--hardware {hardware!r} is unknown: use one of {', '.join(hardware_choices())}.")
    token = resolve_token(token)
    root = Path(root or project_root())
    with tempfile.TemporaryDirectory(prefix="poss-space-") as tmp:
        snapshot = Path(tmp) / "space"
        files = stage(snapshot, root)
        print(format_listing(files, snapshot), file=sys.stderr)
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(token=token)
        from huggingface_hub.errors import HfHubHTTPError

        rev = _git_revision(root)
        try:
            api.create_repo(repo, repo_type="space", space_sdk="gradio", exist_ok=True, private=private or None)
            # delete_patterns="*": files of an earlier deploy that the snapshot no longer has are removed (the Hub
            # never deletes .gitattributes), so the Space mirrors the snapshot.
            api.upload_folder(
                repo_id=repo,
                repo_type="space",
                folder_path=str(snapshot),
                delete_patterns="*",
                commit_message=f"Deploy the demo{f' from {rev}' if rev else ''} (poss_core.deploy.space)",
            )
            if hardware:
                api.request_space_hardware(repo, hardware)
        except HfHubHTTPError as err:
            raise SpaceError(f"the Hub refused the deploy to {repo}: {str(err).splitlines()[0]}") from err
    return f"https://huggingface.co/spaces/{repo}"


# ------------------------------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m poss_core.deploy.space",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stage", help="write the Space's snapshot into OUT_DIR and list it (no token, no network)")
    s.add_argument("out_dir")
    d = sub.add_parser("deploy", help="stage into a temporary folder and upload it to a Gradio Space")
    d.add_argument("--repo", required=True, help="the Space, OWNER/NAME (created if missing)")
    d.add_argument(
        "--hardware",
        default=None,
        help="request this hardware after the upload: cpu-basic (free), cpu-upgrade, zero-a10g, t4-small, "
        "... (paid tiers need billing on the account); default: leave the Space's as it is",
    )
    d.add_argument(
        "--private", action="store_true", help="create the Space private (an existing one keeps its visibility)"
    )
    for name, helptext in (
        ("card", "print (or --out) the Hub model card README.md of a draft folder"),
        ("export-hub", "write a Hub model-repo copy of a draft folder, weights in shards"),
    ):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("draft_dir")
        if name == "export-hub":
            c.add_argument("out_dir")
            c.add_argument(
                "--max-shard-size",
                default=DEFAULT_SHARD_SIZE,
                help="largest shard, e.g. 9MB (default; the Hub's plain-file limit is 10 MB)",
            )
        else:
            c.add_argument("--out", default=None, help="write the card here (e.g. DRAFT_DIR/README.md)")
        c.add_argument("--base-model", default=None, help="the target's Hugging Face id (default: from the draft)")
        c.add_argument("--license", default=None, help="license id (default: model_card.json's, or the target's)")
        c.add_argument("--dataset", action="append", default=None, help="a training dataset id (repeatable)")
    return p


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "stage":
        out = Path(args.out_dir)
        print(format_listing(stage(out), out))
        print("Not uploaded: tests, training token ids, configs, scripts, docs, outputs, git history.")
        print(f"deploy it: python -m poss_core.deploy.space deploy --repo OWNER/NAME   (or: cd {out} && gradio deploy)")
        return 0
    if args.command == "deploy":
        url = deploy(args.repo, hardware=args.hardware, private=args.private)
        print(f"deployed: {url}" + (f" (hardware requested: {args.hardware})" if args.hardware else ""))
        return 0
    overrides = {"base_model": args.base_model, "license": args.license, "datasets": args.dataset}
    if args.command == "card":
        if args.out:
            print(f"wrote {write_model_card(args.draft_dir, args.out, **overrides)}")
        else:
            print(model_card(args.draft_dir, **overrides))
        return 0
    files = export_hub(args.draft_dir, args.out_dir, args.max_shard_size, **overrides)
    print(format_listing(files, Path(args.out_dir), verb="wrote"))
    print(
        f"upload it: huggingface_hub.HfApi().upload_folder(repo_id='OWNER/NAME', folder_path='{args.out_dir}') "
        f"after create_repo('OWNER/NAME', exist_ok=True); then --draft hub:OWNER/NAME"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
