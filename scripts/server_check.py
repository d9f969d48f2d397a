"""Replays the public-server cases against a real `python app.py` on 127.0.0.1 (a free port) and prints figures:

  oracle   one /compare with the oracle lane (a long reference decode): seconds taken against the cap
  fit      one one-token /compare that needs a new tree-budget fit: seconds taken against the cap
  abandon  N clients start long /compare calls and are killed after K s: the server's CPU afterwards
  flood    one client submits M long /compare calls at once: how many were let in and how many refused
  disk     a flood of random uploads (one address, then many): the temp folders' peak against the disk cap; N
           saved runs loaded and saved: what is left after the cache sweep (copies, empty temporary files)
  refuse   log bytes per refused or cancelled call (a bad setting, malformed values, a 100,000-digit integer in
           a saved run, a /compare cancelled while its model loads, a model that fails to load, with
           --quantized an 8-bit /run), and whether a message names a server folder
  memory   K tabs pause a Step on a long prompt and L tabs load a saved run, then only read (/view) past
           --idle-minutes: the server's RSS at start, at the peak and after reaping, and what a reaped tab is told
  fair     N fresh clients at one address queue two long /compare calls each; a visitor from another address
           joins: the place and wait it is told, and when its call started
  prefill  one /compare with the longest prompt and the largest tree (depth 10, top-k 20, budget 256): seconds
           taken against the cap
  own      a visitor loads and saves a run while other sessions at other addresses load and save runs and upload
           16 MB files every 0.5 s: is the visitor's file still served (HTTP 200, the same bytes) --own-wait s later
  bytes    12 uploads of 15 MB sent chunked with Content-Length: 1000 from one address, then one of 1,000 parts: the
           answers, the temp folders' peak against --disk-cap-mb, and the files the many-part upload wrote
  addr     one loopback client rotating invented X-Forwarded-For entries: 40 uploads of 16 MB and 45 long /compare
           calls (how many let in), and a returning visitor's call meanwhile (the place it is told, when it starts)
  models   4-token /compare calls at each precision and quantization: the server's RSS at start, after each call,
           at the peak and at the end, against --session-memory-mb and one target's size
  log      log bytes per GET of /queue/data for an unknown session; the one log line of each refused call (past the
           share, a 413 and a 429 upload, an unknown preset); whether the replies of an upload and of Save name a
           server folder
  replays  M example joins from fresh session hashes, streams never read: the answers, then how long an honest page
           load (page, heartbeat, load event read to its end) takes
  bodies   N JSON bodies of S MB to /queue/join at once: the answers and the server's RSS at the peak
  tabs     K page loads (the load event) from fresh session hashes, never read: the server's RSS a while after
  pages    P pages held open (heartbeats) from fresh session hashes at one address, each page's load event joined and
           never read: the answers and the server's RSS a while after, the pages still open
  malformed  wrongly typed /view calls from open pages for T s: log bytes per second

Each case prints one or more "[case] ..." lines with its figures, and most end with PASS or FAIL and the criterion;
the exit status is 1 when one printed FAIL.

Each starts its own server from --root (default: this checkout; point it at an older checkout for "before"
figures) with its own Gradio temp folder, $TMPDIR and cache folder (the prepared default model is linked in, so
fits made here never touch ~/.cache/poss-demo), and stops it at the end. Only loopback, bounded in time.

    python scripts/server_check.py oracle --preset smollm2-135m --cap 20 [--root /tmp/older-checkout]
    python scripts/server_check.py fit --preset smollm2-135m --cap 20 [--server-args=--no-call-fits]
    python scripts/server_check.py abandon --preset smollm2-135m --clients 4 --kill-after 6
    python scripts/server_check.py flood --preset smollm2-135m --cap 5 --calls 6
    python scripts/server_check.py disk --uploads 6 --wait 25
    python scripts/server_check.py refuse --calls 5 [--quantized]
    python scripts/server_check.py memory --preset smollm2-135m --steps 8 --loads 6
    python scripts/server_check.py fair --preset smollm2-135m --cap 4 --flood-clients 8
    python scripts/server_check.py prefill --preset smollm2-135m --cap 20 --prompt-tokens 2016
    python scripts/server_check.py own --own-wait 60 [--own-wait 600 --server-args=--saved-run-minutes=10]
    python scripts/server_check.py bytes --bytes-requests 12 --parts 1000
    python scripts/server_check.py addr --cap 4
    python scripts/server_check.py models --preset smollm2-135m
    python scripts/server_check.py log --log-gets 200
    python scripts/server_check.py replays --replays 128
    python scripts/server_check.py bodies --bodies 3 --body-mb 200
    python scripts/server_check.py tabs --tabs 2000 --tabs-wait 35
    python scripts/server_check.py pages --pages 2000 --tabs-wait 35
    python scripts/server_check.py malformed --malformed-s 20

Flags an older checkout lacks (--proxy-hops, --saved-run-minutes, --disk-cap-mb, --session-memory-mb, ...) are
passed only where its app (app/page/launch.py and app/server/limits.py, or app/launch.py) has them, so the same case
gives an older checkout's figures; where the server counts trusted proxies, the cases that send X-Forwarded-For
start it with --proxy-hops 1.

(--server-args takes its value after "=" when it starts with "--".)

The server and what is read of it are scripts/server_harness.py's, the clients scripts/server_clients.py's, and the
cases scripts/server_cases_*.py's, by what they attack: queue, memory, uploads, disk, logs.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the harness and the cases are modules beside this file

from server_cases_disk import case_disk, case_own  # noqa: E402
from server_cases_logs import case_log, case_malformed, case_refuse  # noqa: E402
from server_cases_memory import case_memory, case_models, case_pages, case_tabs  # noqa: E402
from server_cases_queue import (  # noqa: E402
    case_abandon,
    case_addr,
    case_fair,
    case_fit,
    case_flood,
    case_oracle,
    case_prefill,
    case_replays,
)
from server_cases_uploads import case_bodies, case_bytes  # noqa: E402
from server_harness import FAILED, ROOT  # noqa: E402

CASES = {
    "oracle": case_oracle,
    "fit": case_fit,
    "abandon": case_abandon,
    "flood": case_flood,
    "disk": case_disk,
    "refuse": case_refuse,
    "memory": case_memory,
    "fair": case_fair,
    "prefill": case_prefill,
    "own": case_own,
    "bytes": case_bytes,
    "addr": case_addr,
    "models": case_models,
    "log": case_log,
    "replays": case_replays,
    "bodies": case_bodies,
    "tabs": case_tabs,
    "pages": case_pages,
    "malformed": case_malformed,
}


def build_parser() -> argparse.ArgumentParser:
    """The case to run and every case's settings (each flag's help names the cases that read it)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("case", choices=list(CASES))
    p.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py runs (default: this one)")
    p.add_argument("--preset", default=None, help="default: smollm2-135m for models, tiny-random for the others")
    p.add_argument("--cap", type=float, default=20.0, help="--max-call-seconds of the server (default 20)")
    p.add_argument(
        "--server-args", default="", help='more flags for app.py, e.g. --server-args="--max-calls-per-client 2"'
    )
    p.add_argument("--timeout", type=float, default=600.0, help="the most seconds to wait for one call")
    p.add_argument("--clients", type=int, default=4, help="abandon: clients started then killed")
    p.add_argument("--kill-after", type=float, default=6.0, help="abandon: seconds before they are killed")
    p.add_argument("--grace", type=float, default=2.0, help="abandon: seconds after the kill before measuring")
    p.add_argument("--window", type=float, default=5.0, help="abandon: seconds of CPU measured")
    p.add_argument("--calls", type=int, default=6, help="flood: calls one client submits; refuse: bad calls")
    p.add_argument("--uploads", type=int, default=6, help="disk: saved runs uploaded and saved")
    p.add_argument("--wait", type=float, default=25.0, help="disk: seconds to wait for the cache sweep")
    p.add_argument("--cache-minutes", type=float, default=0.05, help="disk: the server's --cache-minutes")
    p.add_argument("--flood-uploads", type=int, default=20, help="disk: random uploads from one address, then many")
    p.add_argument("--flood-mb", type=float, default=16.0, help="disk: MB of each random upload")
    p.add_argument(
        "--disk-limit-mb", type=float, default=128.0, help="disk, own, bytes: the cap (--disk-cap-mb) that must hold"
    )
    p.add_argument("--cancel-after", type=float, default=2.0, help="refuse: seconds before /compare is cancelled")
    p.add_argument("--quantized", action="store_true", help="refuse: also an 8-bit /run of the default model")
    p.add_argument("--steps", type=int, default=8, help="memory: tabs that pause a Step on a long prompt")
    p.add_argument("--loads", type=int, default=6, help="memory: tabs that load a saved run")
    p.add_argument("--run-tokens", type=int, default=400, help="memory: new tokens of the saved run loaded")
    p.add_argument("--idle-minutes", type=float, default=0.5, help="memory: the server's --idle-minutes")
    p.add_argument(
        "--budget-mb", type=float, default=600.0, help="memory, models: --session-memory-mb, where there is one"
    )
    p.add_argument("--view-every", type=float, default=10.0, help="memory: seconds between each tab's /view")
    p.add_argument("--reap-wait", type=float, default=25.0, help="memory: seconds past the idle time to wait")
    p.add_argument("--slack-mb", type=float, default=250.0, help="memory: RSS above the start that passes")
    p.add_argument("--prompt-tokens", type=int, default=1900, help="memory, fair, prefill: the long prompt's tokens")
    p.add_argument("--flood-clients", type=int, default=8, help="fair: fresh clients at one address")
    p.add_argument("--calls-each", type=int, default=2, help="fair: long /compare calls each of them submits")
    p.add_argument("--settle", type=float, default=5.0, help="fair, addr: seconds for the flood to join the line")
    p.add_argument("--round-s", type=float, default=6.0, help="prefill: one round and the client, past the cap")
    p.add_argument("--own-wait", type=float, default=60.0, help="own: seconds from the save to the download")
    p.add_argument("--own-cache-minutes", type=float, default=0.5, help="own: the server's --cache-minutes")
    p.add_argument(
        "--saved-run-minutes", type=float, default=1.0, help="own: the server's --saved-run-minutes, where there is one"
    )
    p.add_argument("--own-clients", type=int, default=2, help="own: flooding clients that load and save runs")
    p.add_argument("--own-upload-every", type=float, default=0.5, help="own: seconds between the 16 MB uploads")
    p.add_argument("--bytes-mb", type=float, default=15.0, help="bytes: MB of each upload sent chunked")
    p.add_argument("--bytes-requests", type=int, default=12, help="bytes: those uploads, one address in a row")
    p.add_argument("--parts", type=int, default=1000, help="bytes: parts of the many-part upload")
    p.add_argument("--addr-uploads", type=int, default=40, help="addr: 16 MB uploads from invented addresses")
    p.add_argument("--addr-calls", type=int, default=45, help="addr: long /compare calls from invented addresses")
    p.add_argument("--addr-wait", type=float, default=60.0, help="addr: the most seconds to wait for the visitor")
    p.add_argument("--rounds", type=int, default=2, help="models: times through every precision and quantization")
    p.add_argument("--log-gets", type=int, default=200, help="log: GETs of /queue/data for unknown sessions")
    p.add_argument("--replays", type=int, default=128, help="replays: example joins from fresh session hashes")
    p.add_argument("--load-wait", type=float, default=60.0, help="replays: the most seconds an honest load may try")
    p.add_argument("--bodies", type=int, default=3, help="bodies: large JSON bodies sent at once")
    p.add_argument("--body-mb", type=float, default=200.0, help="bodies: MB of each")
    p.add_argument("--tabs", type=int, default=2000, help="tabs: page loads from fresh session hashes")
    p.add_argument("--tabs-wait", type=float, default=35.0, help="tabs, pages: seconds before the RSS is read")
    p.add_argument("--pages", type=int, default=2000, help="pages: heartbeats held open from fresh session hashes")
    p.add_argument("--malformed-s", type=float, default=20.0, help="malformed: seconds of wrongly typed /view calls")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one case; 1 when it printed a FAIL, else 0."""
    a = build_parser().parse_args(argv)
    a.extra = shlex.split(a.server_args)
    a.preset = a.preset or ("smollm2-135m" if a.case == "models" else "tiny-random")
    FAILED.clear()
    CASES[a.case](a)
    return 1 if FAILED else 0


if __name__ == "__main__":
    raise SystemExit(main())
