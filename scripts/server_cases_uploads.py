"""The public-server cases that attack with request bodies (scripts/server_check.py runs them): large JSON bodies to
the queue at once (bodies), and uploads that declare one size and send another or come in a thousand parts (bytes)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import NamedTuple

from server_clients import BOUNDARY, MB, multipart, raw_post
from server_harness import FolderWatch, RssWatch, Server, files_under, flag_if_known, verdict

BODY_RSS_MB = 150.0  # the most the server's RSS may rise while it refuses the bodies


class Bodies(NamedTuple):
    """What the bodies case measured: each body's answer and the server's RSS before and at its peak (MB)."""

    answers: list[int]
    first_mb: float
    peak_mb: float

    @property
    def grew_mb(self) -> float:
        """How far the RSS rose above its first figure."""
        return self.peak_mb - self.first_mb

    @property
    def ok(self) -> bool:
        """Each body refused with 413, the RSS risen less than BODY_RSS_MB."""
        return self.grew_mb < BODY_RSS_MB and all(s == 413 for s in self.answers)


def big_bodies(server: Server, bodies: int, body_mb: float) -> Bodies:
    """`bodies` JSON bodies of `body_mb` MB posted to /queue/join at once, the server's RSS sampled meanwhile."""
    from concurrent.futures import ThreadPoolExecutor

    body = b'{"data": ["' + b"x" * int(body_mb * MB) + b'"], "fn_index": 0, "session_hash": "big"}'
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    time.sleep(3.0)  # the server settles after its start
    with RssWatch(server.proc.pid) as watch, ThreadPoolExecutor(bodies) as pool:
        answers = list(
            pool.map(
                lambda _: raw_post(server.port, "/gradio_api/queue/join", headers, body, timeout=120)[0],
                range(bodies),
            )
        )
        time.sleep(1.0)
    return Bodies(answers, watch.first, watch.peak)


def case_bodies(a) -> None:
    """Large JSON bodies to /queue/join at once: the server's RSS and the answers."""
    with Server(a.root, a.preset, a.cap, a.extra) as server:
        b = big_bodies(server, a.bodies, a.body_mb)
    print(
        f"[bodies] {a.bodies} JSON bodies of {a.body_mb:g} MB at once: answers {b.answers}; the server's RSS rose "
        f"{b.grew_mb:,.0f} MB at the peak (from {b.first_mb:,.0f} MB). {verdict(b.ok)} (under {BODY_RSS_MB:g} MB, "
        f"each 413)"
    )


def case_bytes(a) -> None:
    """Uploads that declare one size and send another, and one with many parts: the temp folders against the cap,
    and the files the many-part upload writes."""
    extra = [
        *flag_if_known(a.root, "--disk-cap-mb", f"{a.disk_limit_mb:g}"),
        *flag_if_known(a.root, "--proxy-hops", "1"),
        *a.extra,
    ]
    with Server(a.root, "tiny-random", a.cap, extra) as server:
        folders = [server.gradio_tmp, server.tmp]
        form = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
        smuggled = {**form, "Content-Length": "1000", "Transfer-Encoding": "chunked", "X-Forwarded-For": "203.0.113.5"}
        answers: dict[int, int] = {}
        said = ""
        t0 = time.monotonic()
        with FolderWatch(folders) as sent:
            for i in range(a.bytes_requests):
                big = multipart([(f"big{i}.bin", os.urandom(int(a.bytes_mb * MB)))])  # new bytes: a new file each
                status, text = raw_post(server.port, "/gradio_api/upload", smuggled, big, chunked=True)
                answers[status] = answers.get(status, 0) + 1
                said = said or (text.strip()[:100] if status != 200 else "")
            time.sleep(1.0)
        took = time.monotonic() - t0
        many = multipart([(f"part{i}.txt", f"part {i}\n".encode()) for i in range(a.parts)])
        with FolderWatch(folders) as parted:
            status, text = raw_post(
                server.port,
                "/gradio_api/upload",
                {**form, "Content-Length": str(len(many)), "X-Forwarded-For": "203.0.113.6"},
                many,
            )
            time.sleep(1.0)
        try:
            listed = len(json.loads(text)) if status == 200 else 0
        except ValueError:
            listed = 0
        # Gradio writes each part to a temporary file, then moves it to a folder of its own: the files written are
        # the parts' files seen, the temporary files seen, or the files the answer lists, whichever is most.
        named = sum(1 for f in parted.written if re.fullmatch(r"part\d+\.txt", Path(f).name))
        written = max(named, len(parted.written) - named, listed)
        left = len(files_under(*folders)[1] - parted.seen)
    limit = a.disk_limit_mb + 1  # the sampling's own slack
    ok = sent.peak / MB <= limit and parted.peak / MB <= limit and 400 <= status < 500 and written <= 8
    print(
        f"[bytes] {a.bytes_requests} POSTs of a {a.bytes_mb:g} MB file sent chunked with Content-Length: 1000 from "
        f"one address in {took:.1f} s: answers {dict(sorted(answers.items()))}"
        f"{f' ({said!r})' if said else ''}; the temp folders peaked {sent.peak / MB:.0f} MB against the "
        f"{a.disk_limit_mb:g} MB cap"
    )
    print(
        f"[bytes] one upload of {a.parts:,} parts ({len(many) / 1024:.0f} KB): HTTP {status} "
        f"({text.strip()[:100]!r}); {written:,} files written ({listed:,} listed in the answer), {left:,} of them left "
        f"after; peak {parted.peak / MB:.0f} MB. {verdict(ok)} (the folders never past the cap; the "
        f"many-part upload refused, at most 8 files written)"
    )
