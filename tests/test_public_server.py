"""A public server's defences that hold against one visitor: a saved run belongs to its tab, uploads are counted by
the bytes they send, a full disk takes a flood's own files first, every refusal is one log line, and the models kept
loaded stay within the memory total."""

from __future__ import annotations

import io
import json
import os
import time

import pytest
from asgi_request import asgi_request, body_of

from app.server import client_share, file_owners, server_text
from app.server.disk_cap import MB, DiskCap, UploadRate, sweep
from app.server.upload_limits import BodyMeter, UploadLimitMiddleware, boundary_of


def _file(path, size: int, age_s: float, now: float) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (now - age_s, now - age_s))
    return str(path)


def test_a_full_folder_takes_the_flooding_address_first_then_unowned_files_never_the_kept(tmp_path):
    now = time.time() + 10**6
    owner = {}
    honest = _file(tmp_path / "h" / "honest", 100, 900, now)  # the oldest file of all
    owner[honest] = "198.51.100.7"
    unowned = _file(tmp_path / "g" / "gradio-copy", 100, 800, now)
    flood = [_file(tmp_path / "f" / f"flood{i}", 100, 700 - i, now) for i in range(6)]
    owner.update({f: "203.0.113.9" for f in flood})
    kept = _file(tmp_path / "s" / "saved", 100, 950, now)
    owner[kept] = "203.0.113.9"  # the flooder's own protected save counts in its share but stays
    # 900 bytes against a cap of 300, each address's share 200: the flood goes down to its share first (with the
    # kept save counted, 1 file left), then the unowned copy; the honest upload, older than all, stays.
    result = sweep(tmp_path, cap_bytes=300, age_s=10**4, now=now, keep={kept}, address_of=owner.get, share_bytes=200)
    left = {str(p) for p in tmp_path.rglob("*") if p.is_file()}
    assert honest in left and kept in left and unowned not in left
    assert sorted(f for f in flood if f in left) == [flood[-1]]  # the newest of the flood is the last to go
    assert result.left == 300


def test_a_saved_run_is_protected_while_its_tab_lives_and_for_the_keep_time_after():
    seen = {"tab": 0.0}
    owners = file_owners.FileOwners(keep_s=600.0, tab_seen=seen.get, idle_s=lambda: 60.0)
    owners.saved("/cache/poss-runs/a.jsonl", "tab", "198.51.100.7", 10)
    saved_at = owners._files["/cache/poss-runs/a.jsonl"].since
    seen["tab"] = saved_at + 1000.0  # the tab is still in use long after it saved
    assert "/cache/poss-runs/a.jsonl" in owners.protected(now=saved_at + 1500.0)
    # Gone idle at +1000: it lives 60 s more, then the keep time.
    assert "/cache/poss-runs/a.jsonl" in owners.protected(now=saved_at + 1000.0 + 60.0 + 599.0)
    assert "/cache/poss-runs/a.jsonl" not in owners.protected(now=saved_at + 1000.0 + 60.0 + 601.0)
    # A tab the store no longer serves: still the keep time after the save.
    seen.clear()
    assert "/cache/poss-runs/a.jsonl" in owners.protected(now=saved_at + 599.0)


def test_an_address_protects_at_most_its_share_of_saved_runs_and_a_tab_its_newest_few():
    owners = file_owners.FileOwners(per_tab=2, per_address_bytes=250)
    older = []
    for i in range(3):  # one tab: its two newest stay, the oldest is the caller's to delete
        older += owners.saved(f"/c/t{i}", "t", "10.0.0.1", 100)
    assert older == ["/c/t0"]
    owners.forget("/c/t0")
    owners.saved("/c/u0", "u", "10.0.0.1", 100)  # another tab at the same address: 300 bytes > 250
    protected = owners.protected()
    assert "/c/u0" in protected and "/c/t2" in protected and "/c/t1" not in protected  # the address's newest
    assert owners.address_of("/c/t1") == "10.0.0.1" and owners.address_of("/c/else") is None


def test_gradios_own_cache_sweep_skips_the_protected_saved_runs(tmp_path):
    from types import SimpleNamespace

    from gradio.route_utils import delete_files_created_by_app

    saved = _file(tmp_path / "poss-runs" / "mine.jsonl", 10, 0, time.time())
    other = _file(tmp_path / "h" / "upload.bin", 10, 0, time.time())
    owners = file_owners.FileOwners()
    owners.saved(saved, "tab", "10.0.0.1", 10)
    block = SimpleNamespace(keep_in_cache=file_owners.KeepInCache(set(), owners))
    blocks = SimpleNamespace(blocks={1: block}, temp_file_sets=[{saved, other}])
    delete_files_created_by_app(blocks, age=None)  # everything it made, however new
    assert os.path.exists(saved) and not os.path.exists(other)


def _upload(make, headers: dict[str, str], chunks: list[bytes], peer: str = "127.0.0.1", reply: bytes = b'["/x"]'):
    """One POST to /gradio_api/upload through `make(app)`: (status, body, bytes the app read, whether the app saw the
    end of the body)."""
    read, ended = [0], [False]

    async def app(scope, receive, send):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise OSError("client disconnected")  # what Starlette's request.stream() raises, in kind
            read[0] += len(message.get("body", b""))
            if not message.get("more_body"):
                ended[0] = True
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": reply})

    sent = asgi_request(make(app), "POST", "/gradio_api/upload", chunks, headers, client=peer)
    return sent[0]["status"], sent[-1]["body"].decode(), read[0], ended[0]


def _multipart(files: int, size: int, boundary: str = "b0undary") -> bytes:
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="f{i}"\r\n\r\n'.encode()
        + b"x" * size
        + b"\r\n"
        for i in range(files)
    ]
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


@pytest.fixture
def log():
    out = io.StringIO()
    return server_text.RefusalLog(every_s=60.0, out=out), out


def _limits(tmp_path, log, **kw):
    budget = DiskCap(tmp_path, cap_bytes=100 * MB, age_s=600)
    owners = file_owners.FileOwners()
    rate = kw.pop("rate", UploadRate(bytes_per_s=1 * MB, burst_bytes=8 * MB))

    def make(app):
        return UploadLimitMiddleware(app, disk=budget, rate=rate, max_bytes=5 * MB, owners=owners, log=log, **kw)

    return make, budget, owners


def test_an_upload_that_gives_both_a_length_and_chunked_framing_is_refused_unread(tmp_path, log):
    make, budget, _ = _limits(tmp_path, log[0])
    body = _multipart(1, 1000)
    status, text, read, _ = _upload(
        make, {"content-length": "1000", "transfer-encoding": "chunked"}, [body[:500], body[500:]]
    )
    assert (status, read) == (400, 0) and "Transfer-Encoding" in text and budget.used == 0
    assert "refused: upload framing (400), from 127.0.0.1" in log[1].getvalue()


def test_an_upload_is_cut_off_past_its_parts_and_each_part_is_billed(tmp_path, log):
    body = _multipart(20, 10)
    headers = {"content-length": str(len(body)), "content-type": "multipart/form-data; boundary=b0undary"}
    make, _, _ = _limits(tmp_path, log[0], max_parts=8)
    chunks = [body[i : i + 37] for i in range(0, len(body), 37)]  # delimiters split across chunks count once
    status, text, read, ended = _upload(make, headers, chunks)
    assert status == 413 and "at most 8 files" in text and not ended and read < len(body)
    # Within the parts allowed, each file past the first costs the smallest charge: 8 files against a burst of
    # 1 MB (the first billed at its size, 256 KB at least) leave nothing for a second such upload.
    small = UploadRate(bytes_per_s=1.0, burst_bytes=8 * 256 * 1024)
    make, _, _ = _limits(tmp_path, log[0], rate=small, max_parts=8)
    body8 = _multipart(8, 10)
    headers8 = {"content-length": str(len(body8)), "content-type": "multipart/form-data; boundary=b0undary"}
    assert _upload(make, headers8, [body8])[0] == 200
    assert _upload(make, headers8, [body8])[0] == 429


def test_a_body_longer_than_its_length_is_cut_off(tmp_path, log):
    make, _, _ = _limits(tmp_path, log[0])
    status, _, read, ended = _upload(make, {"content-length": "100"}, [b"x" * 80, b"x" * 80, b"x" * 80])
    assert status == 400 and not ended and read == 80


def test_an_accepted_upload_belongs_to_its_address(tmp_path, log, monkeypatch):
    monkeypatch.setattr(client_share, "PROXY_HOPS", 1)
    path = _file(tmp_path / "h" / "run.jsonl", 50, 0, time.time())
    make, budget, owners = _limits(tmp_path, log[0])
    body = _multipart(1, 50)
    headers = {
        "content-length": str(len(body)),
        "content-type": "multipart/form-data; boundary=b0undary",
        "x-forwarded-for": "6.6.6.6, 203.0.113.9",  # the first entry is the client's own words
    }
    assert _upload(make, headers, [body], peer="10.0.0.2", reply=json.dumps([path]).encode())[0] == 200
    assert owners.address_of(path) == "203.0.113.9"


def test_the_body_meter_counts_delimiters_split_across_chunks_once():
    body = _multipart(5, 3)
    meter = BodyMeter(len(body), boundary_of('multipart/form-data; boundary="b0undary"'))
    for i in range(len(body)):
        meter.add(body[i : i + 1])
    assert meter.bytes == len(body) and meter.parts == 6  # five opening delimiters and the closing one


def test_refusals_are_one_line_each_naming_the_limit_and_address_and_a_flood_is_counted(log):
    refused, out = log
    assert refused("upload rate", "203.0.113.9", 429)
    for _ in range(50):
        assert not refused("upload rate", "203.0.113.9", 429)
    assert refused("upload rate", "198.51.100.7", 429)  # another address: its own line
    lines = out.getvalue().splitlines()
    assert lines == [
        "[poss] refused: upload rate (429), from 203.0.113.9",
        "[poss] refused: upload rate (429), from 198.51.100.7",
    ]
    refused.every_s = 0.0
    refused("upload rate", "203.0.113.9", 429)
    assert out.getvalue().splitlines()[-1].endswith("from 203.0.113.9 (and 50 more like it)")


def test_a_queue_stream_for_an_unknown_session_is_one_line_not_a_trace(monkeypatch):
    from types import SimpleNamespace

    out = io.StringIO()
    monkeypatch.setattr(server_text, "REFUSED", server_text.RefusalLog(out=out))
    queue = SimpleNamespace(pending_messages_per_session={"known": object()})
    gradio_app = SimpleNamespace(get_blocks=lambda: SimpleNamespace(_queue=queue))
    reached = []

    async def app(scope, receive, send):
        reached.append(scope["query_string"])

    middleware = client_share.QueueShareMiddleware(app)
    sent = [
        asgi_request(middleware, "GET", "/gradio_api/queue/data", query_string=b"session_hash=" + s, app=gradio_app)
        for s in (b"known", b"forged")
    ]
    assert reached == [b"session_hash=known"] and sent[1][0]["status"] == 404
    assert out.getvalue() == "[poss] refused: an unknown session's queue stream, from 127.0.0.1\n"


def test_the_models_kept_loaded_stay_within_the_memory_total_but_the_one_in_use():
    from poss_core.base.errors import ModelLoadError
    from poss_core.models.presets import get_preset
    from poss_core.models.resident import model_bytes
    from poss_core.runtime.model_cache import ModelCache

    preset = get_preset("tiny-random")
    cache = ModelCache(max_targets=4)
    first = cache.target(preset, precision="float32")
    cache.memory_bytes = model_bytes(first) + 1  # room for the float32 target alone
    second = cache.target(preset, precision="bfloat16")
    assert list(cache._targets.values()) == [second]  # the older one went; the one in use stays
    assert cache.resident_bytes() <= cache.memory_bytes
    again = cache.target(preset, quantization="none", precision="bfloat16")
    assert again is second  # quantization auto and none are one target without a GPU
    cache.memory_bytes = model_bytes(second) // 2
    with pytest.raises(ModelLoadError, match="more than this server's memory total"):
        cache.target(preset, precision="float32")


def test_replies_name_the_alias_never_the_upload_folder_and_requests_get_it_back(tmp_path):
    from app.server.path_alias import ALIAS, PathAliasMiddleware

    folder = str(tmp_path / "gradio")
    seen = {}

    async def app(scope, receive, send):
        message = await receive()
        seen["path"], seen["body"] = scope["path"], message.get("body", b"")
        seen["length"] = dict(scope["headers"]).get(b"content-length")
        ctype = b"text/event-stream" if scope["path"].endswith("/queue/data") else b"application/json"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", ctype)]})
        await send({"type": "http.response.body", "body": f'["{folder}/abc/run.jsonl"]'.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    def call(method: str, path: str, body: bytes = b""):
        headers = {"content-type": "application/json", "content-length": str(len(body))}
        return asgi_request(PathAliasMiddleware(app, folder=lambda: folder), method, path, [body], headers)

    sent = call("POST", "/gradio_api/queue/join", json.dumps({"data": [{"path": f"{ALIAS}/abc/run.jsonl"}]}).encode())
    assert json.loads(seen["body"])["data"][0]["path"] == f"{folder}/abc/run.jsonl"
    assert seen["length"] == str(len(seen["body"])).encode()
    reply = body_of(sent)
    assert json.loads(reply) == [f"{ALIAS}/abc/run.jsonl"] and folder.encode() not in reply
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(reply)).encode()
    call("GET", f"/gradio_api/file={ALIAS}/poss-runs/x.jsonl")
    assert seen["path"] == f"/gradio_api/file={folder}/poss-runs/x.jsonl"
    stream = call("GET", "/gradio_api/queue/data")
    assert all(folder.encode() not in m.get("body", b"") for m in stream)
