"""The pure helpers of scripts/server_check.py's public-server cases: server flag values, the hand-made upload bodies
and raw POSTs, the folder sampling, a refusal's log line, a safetensors parameter count, and main's exit status."""

from __future__ import annotations

import json
import re
import socket
import struct
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the scripts import their sibling modules by name

import server_cases_logs  # noqa: E402
import server_cases_memory  # noqa: E402
import server_check  # noqa: E402
import server_clients  # noqa: E402
import server_harness  # noqa: E402


def test_a_server_flag_is_read_in_either_form_and_the_last_one_counts():
    extra = ["--max-calls-per-address", "8", "--saved-run-minutes=10", "--max-calls-per-address=12"]
    assert server_harness.server_value(extra, "--max-calls-per-address", 40) == 12
    assert server_harness.server_value(extra, "--saved-run-minutes", 1) == 10
    assert server_harness.server_value(extra, "--upload-mb-per-second", 2.0) == 2.0
    assert (
        server_harness.server_value(["--upload-mb-per-second"], "--upload-mb-per-second", 2.0) == 2.0
    )  # no value given


def test_a_multipart_body_has_one_files_part_per_file():
    body = server_clients.multipart([("a.txt", b"one"), ("b.bin", b"\x00two")])
    boundary = f"--{server_clients.BOUNDARY}".encode()
    assert body.count(boundary) == 3 and body.endswith(boundary + b"--\r\n")
    assert body.count(b'name="files"') == 2 and b'filename="b.bin"' in body and b"\x00two\r\n" in body


def _one_request_server(answer: bytes, read_body: bool):
    """A loopback socket that answers one request with `answer` (after reading the whole body, or at once) and keeps
    what it read."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    got = bytearray()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            while b"\r\n\r\n" not in got:
                got.extend(conn.recv(65536))
            while read_body and not got.endswith(b"0\r\n\r\n"):
                got.extend(conn.recv(65536))
            conn.sendall(answer)
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], got, thread


def test_a_raw_post_sends_its_headers_as_given_and_reads_a_chunked_answer():
    answer = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n["a",\r\n4\r\n"b"]\r\n0\r\n\r\n'
    port, got, thread = _one_request_server(answer, read_body=True)
    headers = {"Content-Length": "1000", "Transfer-Encoding": "chunked", "X-Forwarded-For": "203.0.113.5"}
    status, text = server_clients.raw_post(
        port, "/gradio_api/upload", headers, b"x" * (server_clients.MB + 10), chunked=True
    )
    thread.join(10)
    assert (status, json.loads(text)) == (200, ["a", "b"])
    head = bytes(got).split(b"\r\n\r\n", 1)[0]
    assert b"Content-Length: 1000" in head and b"Transfer-Encoding: chunked" in head
    assert b"\r\n100000\r\n" in got and b"\r\na\r\nxxxxxxxxxx\r\n0\r\n\r\n" in got  # 1 MB, then 10 bytes, then the end


def test_a_raw_post_stops_sending_once_answered():
    answer = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbad."
    port, got, thread = _one_request_server(answer, read_body=False)
    status, text = server_clients.raw_post(
        port, "/gradio_api/upload", {}, b"x" * (64 * server_clients.MB), chunked=True, timeout=20
    )
    thread.join(10)
    assert (status, text) == (400, "bad.")


def test_the_watch_sees_files_that_come_and_go(tmp_path):
    (tmp_path / "old.bin").write_bytes(b"1" * 10)
    with server_harness.FolderWatch([tmp_path], every_s=0.01) as watch:
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "new.bin").write_bytes(b"2" * 100)
        threading.Event().wait(0.2)
        (tmp_path / "sub" / "new.bin").unlink()
    assert watch.start_bytes == 10 and watch.peak == 110
    assert [Path(f).name for f in watch.written] == ["new.bin"]
    assert server_harness.files_under(tmp_path) == (10, {str(tmp_path / "old.bin")})


def test_a_refusal_passes_with_one_line_naming_its_limit_and_address_and_no_value():
    line = "[poss] refused: upload rate (429), from 198.51.100.9\n"
    assert server_cases_logs._one_line(line, "198.51.100.9", ["secret"], r"rate") == (True, line.strip("\n"))
    assert not server_cases_logs._one_line(line + line, "198.51.100.9", ["secret"], r"rate")[0]  # two lines
    assert not server_cases_logs._one_line(line, "198.51.100.8", ["secret"], r"rate")[0]  # another address
    assert not server_cases_logs._one_line(line, "198.51.100.9", ["upload"], r"rate")[0]  # a value echoed
    assert not server_cases_logs._one_line(line, "198.51.100.9", ["secret"], r"preset")[0]  # not its limit
    assert not server_cases_logs._one_line("", "198.51.100.9", ["secret"], r"rate")[0]  # nothing logged


def test_a_safetensors_header_gives_the_parameter_count(tmp_path):
    header = json.dumps(
        {
            "__metadata__": {"format": "pt"},
            "a": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]},
            "b": {"dtype": "F32", "shape": [5], "data_offsets": [48, 68]},
        }
    ).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 68)
    assert server_cases_memory._safetensors_params(path) == 17


def test_main_exits_1_after_a_fail(monkeypatch, capsys):
    monkeypatch.setitem(
        server_check.CASES, "own", lambda a: print(f"[own] x. {server_harness.verdict(a.preset == 'x')}")
    )
    assert server_check.main(["own", "--preset", "x"]) == 0
    assert server_check.main(["own"]) == 1
    assert server_check.main(["own", "--preset", "x"]) == 0  # each run counts its own verdicts
    assert capsys.readouterr().out.count("FAIL") == 1


def test_a_flag_is_known_from_the_launch_module_or_the_limits_declaration(tmp_path):
    (tmp_path / "app" / "page").mkdir(parents=True)
    (tmp_path / "app" / "server").mkdir()
    (tmp_path / "app" / "page" / "launch.py").write_text('p.add_argument("--max-new-tokens", type=int)\n')
    (tmp_path / "app" / "server" / "limits.py").write_text('Flag("disk-cap-mb", "the most the cache may hold")\n')
    assert server_harness.has_flag(tmp_path, "--max-new-tokens") and server_harness.has_flag(tmp_path, "--disk-cap-mb")
    assert server_harness.flag_if_known(tmp_path, "--disk-cap-mb", "64") == ["--disk-cap-mb", "64"]
    assert server_harness.flag_if_known(tmp_path, "--proxy-hops", "1") == []  # an older checkout runs without it
    for flag in ("--max-new-tokens", "--disk-cap-mb", "--proxy-hops", "--saved-run-minutes", "--session-memory-mb"):
        assert server_harness.has_flag(ROOT, flag), flag  # this checkout's app takes every flag the cases pass


def test_help_lists_every_case(capsys):
    with pytest.raises(SystemExit):
        server_check.main(["--help"])
    said = capsys.readouterr().out
    assert "{" + ",".join(server_check.CASES) + "}" in said
    for case in server_check.CASES:
        assert re.search(rf"^  {case}\s", said, re.MULTILINE), f"the help does not describe {case}"
