"""The loopback server the public-server cases start (scripts/server_check.py), and what they read of it: its
process's CPU and memory, its temp folders, its log and its flags, and the PASS or FAIL of each printed figure.

scripts/server_clients.py holds what the cases send it; server_soak.py, class_load.py and gpu_app_check.py start the
same `Server`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_mb(pid: int, key: str = "VmHWM") -> float:
    """A process's peak (VmHWM) or current (VmRSS) resident memory in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb(pid: int) -> float:
    """A process's resident memory, MB."""
    return peak_rss_mb(pid, "VmRSS")


# Cancelled calls stop within a round, but on a busy 2-core machine the last of them (and Gradio's own clean-up)
# can take a few seconds: a server must settle within IDLE_WITHIN_S of its last call. Work left running (a poll that
# never ends, a decode nobody reads) keeps it busy past that.
IDLE_WITHIN_S, IDLE_CPU_S = 10.0, 0.3


def idle_window(pid: int, within_s: float = IDLE_WITHIN_S, quiet_cpu_s: float = IDLE_CPU_S) -> tuple[float, float]:
    """The server's CPU seconds in the first one-second window with less than quiet_cpu_s of it, checked for
    within_s (else the last window's), and how many seconds from the call that window ended."""
    start = time.monotonic()
    while True:
        cpu0 = cpu_seconds(pid)
        time.sleep(1.0)
        used = cpu_seconds(pid) - cpu0
        settled = time.monotonic() - start
        if used < quiet_cpu_s or settled >= within_s:
            return used, settled


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process and its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def folder_mb(path: Path) -> float:
    """The MB of the files under a folder (0 where it is gone)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20 if path.exists() else 0.0


def files_under(*folders: Path) -> tuple[int, set[str]]:
    """The bytes and paths of the regular files under the folders (a file deleted meanwhile is left out)."""
    total, names, stack = 0, set(), [str(f) for f in folders]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
                    names.add(entry.path)
            except OSError:
                pass
    return total, names


class _Sampler:
    """Calls `sample()` in a thread every `every_s` while in a `with`."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        """One sample (each watch takes its own)."""
        raise NotImplementedError

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class FolderWatch(_Sampler):
    """Samples folders every `every_s` in a thread while in a `with`: their peak bytes, and the files that appeared
    meanwhile (`written`, deleted ones included)."""

    def __init__(self, folders: list[Path], every_s: float = 0.05) -> None:
        super().__init__(every_s)
        self.folders = folders
        self.start_bytes, self.seen = files_under(*folders)
        self.peak, self.written = self.start_bytes, set()

    def sample(self) -> None:
        """The folders' bytes now, and the files in them not there at the start."""
        size, names = files_under(*self.folders)
        self.peak, self.written = max(self.peak, size), self.written | (names - self.seen)

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        self.sample()  # what the last moments wrote


class RssWatch(_Sampler):
    """The server's resident memory sampled every 0.1 s: its first and highest figures (MB)."""

    def __init__(self, pid: int) -> None:
        super().__init__(0.1)
        self.pid, self.first, self.peak = pid, rss_mb(pid), 0.0

    def sample(self) -> None:
        """The resident memory now, kept if it is the highest yet."""
        self.peak = max(self.peak, rss_mb(self.pid))


FAILED: list[str] = []  # the verdicts that failed in this run of main


def verdict(ok: bool) -> str:
    """PASS or FAIL for a printed line; a FAIL makes main's exit status 1."""
    if not ok:
        FAILED.append("FAIL")
    return "PASS" if ok else "FAIL"


def has_flag(root: Path, flag: str) -> bool:
    """Whether the checkout's app takes the flag: its limits' flags are declared without their dashes in
    app/server/limits.py, the others in app/page/launch.py (in older checkouts app/server/launch.py or
    app/launch.py)."""
    files = ("app/page/launch.py", "app/server/limits.py", "app/server/launch.py", "app/launch.py")
    texts = [(root / name).read_text() for name in files if (root / name).exists()]
    return any(flag in text or f'"{flag[2:]}"' in text for text in texts)


def flag_if_known(root: Path, flag: str, value: str) -> list[str]:
    """[flag, value] where the checkout's app has the flag (an older checkout runs without it)."""
    return [flag, value] if has_flag(root, flag) else []


def server_value(extra: list[str], flag: str, default: float) -> float:
    """A server flag's value among the extra arguments ("--flag V" or "--flag=V", the last one given), else
    `default`."""
    value = default
    for i, arg in enumerate(extra):
        if arg == flag and i + 1 < len(extra):
            value = float(extra[i + 1])
        elif arg.startswith(flag + "="):
            value = float(arg.split("=", 1)[1])
    return value


class Server:
    """`python app.py` from `root` on a free loopback port, in its own temp and cache folders."""

    def __init__(
        self,
        root: Path,
        preset: str,
        cap: float,
        extra: list[str],
        threads: int = 1,
        log_path: Path | None = None,
        startup_s: float = 180.0,
    ) -> None:
        """`log_path` keeps the server's log past the run (else it goes with the temp folders); `startup_s` bounds
        the wait for the page (the time it took is `started_s`)."""
        self.dir = Path(tempfile.mkdtemp(prefix="poss-check-"))
        self.log_path, self.startup_s, self.started_s = log_path or self.dir / "server.log", startup_s, 0.0
        self.gradio_tmp, self.tmp, cache = self.dir / "gradio", self.dir / "tmp", self.dir / "cache"
        for d in (self.gradio_tmp, self.tmp, cache):
            d.mkdir()
        home_cache = Path(os.environ.get("POSS_CACHE_DIR", Path.home() / ".cache" / "poss-demo"))
        for item in home_cache.glob("*"):  # the prepared models, not the fits or curves
            if item.is_dir():
                (cache / item.name).symlink_to(item)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {
            **os.environ,
            "GRADIO_TEMP_DIR": str(self.gradio_tmp),
            "TMPDIR": str(self.tmp),
            "POSS_CACHE_DIR": str(cache),
            "GRADIO_ANALYTICS_ENABLED": "False",
        }
        self.log = open(self.log_path, "w")
        self.cmd = [
            sys.executable,
            "app.py",
            "--preset",
            preset,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--threads",
            str(threads),
            "--max-call-seconds",
            str(cap),
            "--no-preload",
            *self.token_limit(root),
            *extra,
        ]
        self.proc = subprocess.Popen(self.cmd, cwd=root, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    @staticmethod
    def token_limit(root: Path) -> list[str]:
        """The cases ask for long runs on purpose (the per-call cap is what they check): lift the server's
        --max-new-tokens to the settings' bound where the checkout has that flag."""
        return ["--max-new-tokens", "2048"] if has_flag(root, "--max-new-tokens") else []

    def __enter__(self) -> "Server":
        t0 = time.monotonic()
        deadline = t0 + self.startup_s
        while True:
            try:
                urllib.request.urlopen(self.url, timeout=2).read(100)
                self.started_s = time.monotonic() - t0
                return self
            except Exception:  # noqa: BLE001
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the app did not start:\n{self.log_text()[-3000:]}")
                time.sleep(0.5)

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_text(self) -> str:
        """The server's whole log so far."""
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def cpu_percent(self, seconds: float) -> float:
        """The server's CPU use over the next `seconds`, in percent of one core."""
        c0, t0 = cpu_seconds(self.proc.pid), time.monotonic()
        time.sleep(seconds)
        return 100.0 * (cpu_seconds(self.proc.pid) - c0) / (time.monotonic() - t0)

    def settle(self, within_s: float = IDLE_WITHIN_S, quiet_cpu_s: float = IDLE_CPU_S) -> tuple[float, float]:
        """idle_window for this server."""
        return idle_window(self.proc.pid, within_s, quiet_cpu_s)


def log_size(server: Server) -> int:
    """The server's log's bytes so far (where a later `logged` starts)."""
    server.log.flush()
    return (server.dir / "server.log").stat().st_size


def logged(server: Server, since: int, settle: float = 1.5) -> str:
    """What the server's log gained since byte `since`, once it has settled."""
    time.sleep(settle)
    server.log.flush()
    with open(server.dir / "server.log", "rb") as f:
        f.seek(since)
        return f.read().decode(errors="replace")
