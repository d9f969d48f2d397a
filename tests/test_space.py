"""Deploying to a Hugging Face Space: the staged snapshot, its front matter, the deploy calls, and the package."""

import os
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from poss_core.base.paths import assets_dir, project_root
from poss_core.deploy import space
from poss_core.deploy.hub_files import HUB_FILE_LIMIT, SpaceError
from poss_core.deploy.space import deploy, stage
from poss_core.models.presets import DEFAULT_PRESET

ROOT = project_root()


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    out = tmp_path_factory.mktemp("space") / "snapshot"
    return out, stage(out)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection (or to build an HfApi) fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the network was touched")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr("huggingface_hub.HfApi", refuse)


def test_snapshot_holds_what_the_space_needs_and_nothing_else(staged):
    out, files = staged
    paths = {f.path for f in files}
    assert paths == {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    for need in (
        "app.py",
        "README.md",
        "requirements.txt",
        "app/page/ui.py",
        "poss_core/deploy/space.py",
        "assets/app.css",
        "assets/examples/prompts.json",
        "assets/recordings/smollm2-135m/01-chat.jsonl.gz",
        "assets/drafts/smollm2-135m/poss2/model.safetensors",
        "assets/drafts/smollm2-135m/poss2/poss_draft.json",
        "assets/drafts/smollm2-135m/poss2/README.md",
    ):
        assert need in paths, need
    for p in paths:
        assert not re.match(r"(tests|configs|scripts|docs|results|runs|data|logs|assets/training_data)/", p), p
        assert "__pycache__" not in p and not p.endswith(".pyc") and not p.startswith(".git") and "/." not in p
    assert ("assets/demo.png" in paths) == ("assets/demo.png" in (ROOT / "README.md").read_text())


def test_no_file_over_10_mb_goes_up_without_lfs(staged):
    _, files = staged
    assert any(f.size > HUB_FILE_LIMIT for f in files)  # the bundled drafts: the case this guards
    for f in files:
        if f.size > HUB_FILE_LIMIT or f.path.endswith((".safetensors", ".png")):
            assert f.lfs, f.path
    assert not any(f.lfs for f in files if f.path.endswith(".py"))


def test_snapshot_front_matter_is_a_valid_gradio_space(staged):
    out, _ = staged
    meta = space.front_matter(out / "README.md")
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py" and (out / "app.py").is_file()
    assert str(meta["sdk_version"]) == space.gradio_pin(out / "requirements.txt")


def fake_root(tmp_path, sdk_version="6.31.0", pin="6.31.0"):
    root = tmp_path / "root"
    for d in ("app", "poss_core", "assets/drafts"):
        (root / d).mkdir(parents=True)
    (root / "app.py").write_text("print('hi')\n")
    (root / "README.md").write_text(f"---\nsdk: gradio\nsdk_version: {sdk_version}\napp_file: app.py\n---\n# x\n")
    (root / "requirements.txt").write_text(f"torch==2.13.0\ngradio=={pin}\n")
    return root


def test_staging_refuses_a_sdk_version_that_disagrees_with_the_pin(tmp_path):
    with pytest.raises(SpaceError, match=r"sdk_version: 6\.0\.0 .*gradio==6\.31\.0"):
        stage(tmp_path / "out", fake_root(tmp_path, sdk_version="6.0.0"))
    assert not (tmp_path / "out").exists()


def test_staging_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.txt").write_text("x")
    with pytest.raises(SpaceError, match="not an empty folder"):
        stage(tmp_path / "out", fake_root(tmp_path))


def test_snapshot_imports_without_the_checkout(staged):
    """The engine imports from the snapshot alone and resolves the drafts inside it."""
    out, _ = staged
    code = (
        "import poss_core, poss_core.deploy.space, poss_core.models.presets as p; print(poss_core.__file__); "
        f"print(p.get_preset({DEFAULT_PRESET!r}).drafts['poss2'].source)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("POSS_DRAFTS_DIR", "POSS_ASSETS_DIR")}
    env["PYTHONPATH"] = str(out)
    res = subprocess.run([sys.executable, "-c", code], cwd=out, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    module, draft = res.stdout.split()
    assert Path(module).resolve().is_relative_to(out.resolve()) and Path(draft).resolve().is_relative_to(out.resolve())


@pytest.mark.slow
def test_snapshot_app_imports_without_the_checkout(staged):
    """`import app.page.ui` (gradio, the layout, CSS, examples) and app.py's flags work from the snapshot alone."""
    out, _ = staged
    env = {**os.environ, "PYTHONPATH": str(out)}
    code = "import app.page.ui as ui, poss_core; print(ui.__file__); print(poss_core.__file__); print(len(ui.EXAMPLES))"
    res = subprocess.run([sys.executable, "-c", code], cwd=out, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    ui_file, core_file, n_examples = res.stdout.split()[-3:]
    assert all(Path(f).resolve().is_relative_to(out.resolve()) for f in (ui_file, core_file)) and int(n_examples) > 0
    res = subprocess.run(
        [sys.executable, "app.py", "--help"], cwd=out, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0 and "--preset" in res.stdout, res.stderr


def test_deploy_without_a_token_says_so_before_any_network(monkeypatch, tmp_path, no_network, capsys):
    import huggingface_hub.constants as hub_constants

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hub_constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with pytest.raises(SpaceError, match="no Hugging Face token: set HF_TOKEN .*hf auth login"):
        deploy("me/poss-demo")
    assert space.main(["deploy", "--repo", "me/poss-demo"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no Hugging Face token") and "\n" not in err


def test_deploy_refuses_bad_flags_before_any_network(no_network):
    with pytest.raises(SpaceError, match="not OWNER/NAME"):
        deploy("poss-demo", token="hf_x")
    with pytest.raises(SpaceError, match="--hardware 'gpu-please' is unknown: use one of cpu-basic, cpu-upgrade"):
        deploy("me/poss-demo", hardware="gpu-please", token="hf_x")


class FakeHfApi:
    def __init__(self):
        self.calls = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, **kwargs):
        folder = Path(kwargs["folder_path"])  # a temporary folder: look at it while it exists
        kwargs["files"] = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        self.calls.append(("upload_folder", kwargs.pop("repo_id"), kwargs))

    def request_space_hardware(self, repo_id, hardware, **kwargs):
        self.calls.append(("request_space_hardware", repo_id, {"hardware": hardware, **kwargs}))


@pytest.mark.parametrize("hardware,private", [("cpu-upgrade", True), (None, False)])
def test_deploy_creates_the_space_and_uploads_the_staged_snapshot(no_network, staged, hardware, private):
    api = FakeHfApi()
    url = deploy("me/poss-demo", hardware=hardware, private=private, token="hf_x", api=api)
    assert url == "https://huggingface.co/spaces/me/poss-demo"
    names = [c[0] for c in api.calls]
    assert names == ["create_repo", "upload_folder"] + (["request_space_hardware"] if hardware else [])
    _, repo, kwargs = api.calls[0]
    assert repo == "me/poss-demo"
    assert kwargs == {
        "repo_type": "space",
        "space_sdk": "gradio",
        "exist_ok": True,
        "private": True if private else None,
    }
    _, repo, kwargs = api.calls[1]
    assert repo == "me/poss-demo" and kwargs["repo_type"] == "space" and kwargs["delete_patterns"] == "*"
    assert kwargs["files"] == sorted(f.path for f in staged[1])  # exactly the snapshot, nothing from the checkout
    assert not Path(kwargs["folder_path"]).exists()  # the temporary snapshot is gone afterwards
    if hardware:
        assert api.calls[2][1:] == ("me/poss-demo", {"hardware": "cpu-upgrade"})


def test_pyproject_matches_requirements_and_keeps_the_pytest_table():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert sorted(project["project"]["dependencies"]) == sorted(r for r in reqs if r)
    assert project["project"]["name"] == "poss-demo" and project["project"]["requires-python"] == ">=3.11"
    scripts = project["project"]["scripts"]
    assert (
        scripts["poss-space"] == "poss_core.deploy.space:main" and scripts["poss-generate"] == "poss_core.generate:main"
    )
    assert any(m.startswith("slow:") for m in project["tool"]["pytest"]["ini_options"]["markers"])


def test_assets_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("POSS_ASSETS_DIR", raising=False)
    assert (assets_dir() / "drafts").is_dir()
    monkeypatch.setenv("POSS_ASSETS_DIR", str(tmp_path))
    assert assets_dir() == tmp_path


def test_zerogpu_decorated_handlers_still_run_on_a_cpu():
    """With `spaces` installed (the dev requirements), the app's handlers go through `spaces.GPU`; off a ZeroGPU
    Space that must leave them working, generators included (Run and Step stream)."""
    pytest.importorskip("spaces")
    from app.page import ui

    def streaming(n):
        yield from range(n)

    assert ui._gpu(lambda x: x + 1)(1) == 2
    assert list(ui._gpu(streaming)(3)) == [0, 1, 2]
