"""The public-server cases that attack the disk and its files (scripts/server_check.py runs them): floods of uploads
and saved runs against the disk cap and the cache sweep (disk), and a visitor's saved run kept through a flood of
others' (own)."""

from __future__ import annotations

import os
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

from server_clients import MB, VIEW, file_data, saved_run, upload_flood
from server_harness import Server, files_under, flag_if_known, folder_mb, verdict


def case_disk(a) -> None:
    """A flood of random uploads from one address, then from many; then saved runs loaded and saved, with the
    client's downloads landing in the server's Gradio folder (what a client on the same machine does by default):
    the folders' peak against the cap, and what is left once the sweep has run."""
    from gradio_client import Client, handle_file

    files = [saved_run(Path(tempfile.mkdtemp()) / f"run{i}.jsonl", i) for i in range(a.uploads)]
    mb = sum(f.stat().st_size for f in files) / 2**20
    cap = [*flag_if_known(a.root, "--disk-cap-mb", f"{a.disk_limit_mb:g}"), *flag_if_known(a.root, "--proxy-hops", "1")]
    # The saved runs belong to their tab for as long as it lives and --saved-run-minutes after: short here, so that
    # the sweep's leftovers are measured within the wait.
    short = [
        "--idle-minutes",
        f"{a.cache_minutes:g}",
        *flag_if_known(a.root, "--saved-run-minutes", f"{a.cache_minutes:g}"),
    ]
    extra = ["--cache-minutes", f"{a.cache_minutes:g}", *cap, *short, *a.extra]
    with Server(a.root, "tiny-random", a.cap, extra) as server:

        def used() -> float:
            return folder_mb(server.gradio_tmp) + folder_mb(server.tmp)

        base = used()
        one = upload_flood(server.url, a.flood_uploads, a.flood_mb, ["203.0.113.1"], used)
        many = upload_flood(server.url, a.flood_uploads, a.flood_mb, [f"198.51.100.{i}" for i in range(1, 255)], used)
        c = Client(server.url, verbose=False, download_files=str(server.gradio_tmp))
        for f in files:
            c.predict(handle_file(str(f)), *VIEW, api_name="/load_run")
            c.predict(api_name="/save_run")
        grown = used() - base
        time.sleep(a.wait)
        left = used() - base
        leftovers = [p for p in server.gradio_tmp.rglob("*") if p.is_file()]
        runs = sum(1 for p in leftovers if p.name.startswith("poss-run-"))
        empty = sum(1 for p in leftovers if p.stat().st_size == 0)
    limit = a.disk_limit_mb + 1  # the folder of a Server holds its log too
    ok = one[1] - base <= limit and many[1] - base <= limit and runs == 0 and empty == 0 and left <= 1.0
    for who, (statuses, peak, took) in (("one address", one), ("254 addresses", many)):
        print(
            f"[disk] {a.flood_uploads} uploads of {a.flood_mb:g} MB of random bytes from {who} in {took:.1f} s: "
            f"answers {dict(sorted(statuses.items()))}; the temp folders peaked {peak - base:.0f} MB above the start"
        )
    print(
        f"[disk] then {a.uploads} loads ({mb:.1f} MB in all) and {a.uploads} saves: {grown:.1f} MB above the start; "
        f"{a.wait:g} s later (cache age {a.cache_minutes:g} min): {left:.1f} MB, {len(leftovers)} files left "
        f"({runs} saved runs or copies, {empty} empty temporary files). {verdict(ok)} (peaks within "
        f"{a.disk_limit_mb:g} MB, nothing left after the sweep)"
    )


class _OwnFlood:
    """While in a `with`: `clients` threads that load and save runs as new sessions from new addresses, and one that
    uploads 16 MB of random bytes every `upload_every` s from rotating addresses; `tally` counts what they got."""

    def __init__(self, url: str, run: Path, clients: int, upload_every: float) -> None:
        self.url, self.run, self.upload_every = url, run, upload_every
        self.stop, self.lock = threading.Event(), threading.Lock()
        self.tally: dict[str, int] = {}
        self.why: list[str] = []  # the first refusal's words
        self.workers = [threading.Thread(target=self.load_and_save, args=(k,), daemon=True) for k in range(clients)]
        self.workers.append(threading.Thread(target=self.upload, daemon=True))

    def count(self, what: str, err: Exception | None = None) -> None:
        """One more `what`; the first error's last line is kept."""
        with self.lock:
            self.tally[what] = self.tally.get(what, 0) + 1
            if err is not None and not self.why:
                self.why.append(((str(err) or type(err).__name__).strip().splitlines() or [""])[-1][:100])

    def load_and_save(self, k: int) -> None:
        """New sessions from new addresses, each loading and saving a run a few times (nothing decodes)."""
        from gradio_client import Client, handle_file

        i = 0
        while not self.stop.is_set():
            i += 1
            who = {"X-Forwarded-For": f"203.0.113.{(k * 97 + i) % 250 + 1}"}
            try:
                c = Client(self.url, verbose=False, download_files=False, headers=who)
            except Exception as err:  # noqa: BLE001 - a refused page load counts as a failed save
                self.count("failed", err)
                self.stop.wait(0.2)
                continue
            for _ in range(4):
                if self.stop.is_set():
                    break
                try:
                    c.predict(handle_file(str(self.run)), *VIEW, api_name="/load_run")
                    c.predict(api_name="/save_run")
                    self.count("saves")
                except Exception as err:  # noqa: BLE001 - refused or cleared: the flood goes on
                    self.count("failed", err)
                    self.stop.wait(0.2)  # as a script retrying would, not a busy loop

    def upload(self) -> None:
        """16 MB of random bytes every `upload_every` s, each from the next address."""
        import httpx

        data, i = os.urandom(16 * MB), 0
        with httpx.Client(timeout=120) as http:
            while not self.stop.wait(self.upload_every):
                i += 1
                who = {"X-Forwarded-For": f"192.0.2.{i % 250 + 1}"}
                try:
                    status = http.post(
                        self.url + "gradio_api/upload", files={"files": (f"r{i}.bin", data)}, headers=who
                    ).status_code
                except httpx.HTTPError as err:
                    status = type(err).__name__
                self.count(f"upload {status}")

    def __enter__(self) -> "_OwnFlood":
        for w in self.workers:
            w.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for w in self.workers:
            w.join(timeout=120)


def _watch_saved(server: Server, on_disk: Path | None, saved_at: float, wait_s: float) -> tuple[float | None, int]:
    """Until `wait_s` after the save: when the saved file left the disk (seconds after the save, or None) and the
    temp folders' peak bytes."""
    gone_at, peak = None, 0
    while time.monotonic() - saved_at < wait_s:
        if gone_at is None and on_disk is not None and not on_disk.exists():
            gone_at = time.monotonic() - saved_at
        peak = max(peak, files_under(server.gradio_tmp, server.tmp)[0])
        time.sleep(0.5)
    return gone_at, peak


def _own_report(a, first, last, flood: _OwnFlood, gone_at: float | None, on_disk, peak: int, waited: float) -> None:
    """The own case's two lines: what the flood did, then whether the visitor's download still served its bytes."""
    tally, why = flood.tally, flood.why
    uploads = {k.split(" ", 1)[1]: v for k, v in sorted(tally.items()) if k.startswith("upload ")}
    same = last.status_code == 200 and first.status_code == 200 and last.content == first.content
    print(
        f"[own] a visitor saved its run ({len(first.content) / MB:.1f} MB; download answered {first.status_code}), "
        f"then {a.own_clients} flooding clients (a new session and address every 4 runs) loaded and saved "
        f"{tally.get('saves', 0)} runs ({tally.get('failed', 0)} refused or failed"
        f"{f', the first told {why[0]!r}' if why else ''}) and uploaded 16 MB every {a.own_upload_every:g} s "
        f"(answers {uploads}); the temp folders peaked {peak / MB:.0f} MB (cap "
        f"{a.disk_limit_mb:g} MB, cache age {a.own_cache_minutes:g} min); the file was "
        + (f"deleted {gone_at:.1f} s after the save" if gone_at is not None else "still on disk" if on_disk else "?")
    )
    print(
        f"[own] the visitor's download {waited:.0f} s after saving: HTTP {last.status_code}"
        f"{', the same bytes' if same else ', other bytes' if last.status_code == 200 else ''}. {verdict(same)} "
        f"(served, HTTP 200 with the bytes saved)"
    )


def case_own(a) -> None:
    """A visitor's saved run while other clients (other sessions and addresses) load and save runs and upload random
    files: is it still downloadable --own-wait seconds after it was saved?"""
    import httpx
    from gradio_client import Client, handle_file

    honest_run = saved_run(Path(tempfile.mkdtemp()) / "honest.jsonl", 0)
    flood_run = saved_run(Path(tempfile.mkdtemp()) / "flood.jsonl", 1)
    extra = [
        "--cache-minutes",
        f"{a.own_cache_minutes:g}",
        *flag_if_known(a.root, "--disk-cap-mb", f"{a.disk_limit_mb:g}"),
        *flag_if_known(a.root, "--saved-run-minutes", f"{a.saved_run_minutes:g}"),
        *flag_if_known(a.root, "--proxy-hops", "1"),  # the clients' X-Forwarded-For entries are their addresses
        *a.extra,
    ]
    with Server(a.root, "tiny-random", a.cap, extra) as server:
        mine = {"X-Forwarded-For": "198.51.100.20"}
        honest = Client(server.url, verbose=False, download_files=False, headers=mine)
        honest.predict(handle_file(str(honest_run)), *VIEW, api_name="/load_run")
        saved = file_data(honest.predict(api_name="/save_run"))
        saved_at = time.monotonic()
        url = urllib.parse.urljoin(server.url, saved["url"])
        name = saved.get("orig_name") or Path(saved.get("path") or "").name
        on_disk = next(iter(server.gradio_tmp.rglob(name)), None) if name else None
        with httpx.Client(timeout=60, headers=mine) as http:
            first = http.get(url)
        with _OwnFlood(server.url, flood_run, a.own_clients, a.own_upload_every) as flood:
            gone_at, peak = _watch_saved(server, on_disk, saved_at, a.own_wait)
            waited = time.monotonic() - saved_at
            with httpx.Client(timeout=60, headers=mine) as http:
                last = http.get(url)
    _own_report(a, first, last, flood, gone_at, on_disk, peak, waited)
