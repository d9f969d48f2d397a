"""Files bound for the Hub: which go up through LFS/Xet (over 10 MB or binary), their listing, and the error that
staging, deploying and exporting raise."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..base.errors import PossError

HUB_FILE_LIMIT = 10 * 1000 * 1000  # the Hub refuses plain (non-LFS/Xet) files over 10 MB
BINARY_SUFFIXES = {
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".gguf",
    ".npz",
    ".npy",
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".webp",
    ".ico",
    ".pdf",
    ".zip",
    ".gz",
}


class SpaceError(PossError):
    """Staging or deploying cannot go on: a missing file, an inconsistent pin, no token, a bad repo id."""


@dataclass(frozen=True)
class StagedFile:
    """One file of a staged snapshot or an exported model repo, as it goes up."""

    path: str  # relative to the snapshot, with forward slashes
    size: int
    lfs: bool  # goes through LFS/Xet: over 10 MB or binary


def _is_binary(path: Path) -> bool:
    if path.suffix.lower() in BINARY_SUFFIXES:
        return True
    with path.open("rb") as fh:
        return b"\0" in fh.read(8192)


def list_files(folder: Path) -> list[StagedFile]:
    """Every file under `folder`, each marked for LFS/Xet or plain git."""
    files = []
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        size = f.stat().st_size
        files.append(StagedFile(f.relative_to(folder).as_posix(), size, size > HUB_FILE_LIMIT or _is_binary(f)))
    return files


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def format_listing(files: list[StagedFile], out: Path, verb: str = "staged") -> str:
    """The files as a table of size, upload route and path, with the totals."""
    lfs = [f for f in files if f.lfs]
    lines = [
        f"{verb} {len(files)} files ({_mb(sum(f.size for f in files))}) into {out}:",
        f"  {'size':>9}  {'upload':<8} path",
    ]
    lines += [f"  {_mb(f.size):>9}  {'LFS/Xet' if f.lfs else 'git':<8} {f.path}" for f in files]
    lines.append(
        f"{len(lfs)} files ({_mb(sum(f.size for f in lfs))}) go through LFS/Xet (over 10 MB or binary); "
        f"the other {len(files) - len(lfs)} are plain text."
    )
    return "\n".join(lines)
