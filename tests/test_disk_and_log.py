"""The disk stays under a total (the sweep by age and by size, the uploads' rate per address and the upload
middleware), and the log stays readable (refused calls in one line, bitsandbytes' warning once, no server paths in
messages, an over-long integer in a saved run refused without a trace)."""

from __future__ import annotations

import asyncio
import io
import logging
import math
import os
import sys
import time
from types import SimpleNamespace

import pytest
from asgi_request import asgi_request

from app.actions import saved_files
from app.server import disk_cap, server_text
from app.server.disk_cap import MB, DiskCap, UploadRate, sweep
from app.server.upload_limits import UploadLimitMiddleware


def _file(path, size: int, age_s: float, now: float) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (now - age_s, now - age_s))
    return str(path)


def _names(folder) -> set[str]:
    return {p.name for p in folder.rglob("*") if p.is_file()}


def test_the_sweep_deletes_by_age_then_the_oldest_until_under_the_cap(tmp_path):
    now = time.time() + 10**6  # a file's ctime is when it was made here: the sweep's clock runs far ahead of it
    for name, age in (("a", 5000), ("b", 4000), ("c", 3000), ("d", 2000), ("e", 1000)):
        _file(tmp_path / "h" / name, 100, age, now)
    # Age 4500 s: "a" is too old; the cap of 250 bytes then takes "b" and "c", the oldest of the rest.
    result = sweep(tmp_path, cap_bytes=250, age_s=4500, now=now)
    assert _names(tmp_path) == {"d", "e"}
    assert (result.removed, result.freed, result.left) == (3, 300, 200)
    # Room for an upload of 150 bytes: one more goes, the oldest.
    assert sweep(tmp_path, cap_bytes=250, age_s=4500, room=150, now=now).removed == 1
    assert _names(tmp_path) == {"e"}


def test_the_sweep_keeps_new_files_under_the_cap_and_the_kept_ones_and_removes_empty_folders(tmp_path):
    now = time.time() + 10**6
    kept = _file(tmp_path / "k" / "kept", 1000, 9000, now)
    _file(tmp_path / "x" / "new", 10, 10, now)
    empty = tmp_path / "gone" / "deeper"
    empty.mkdir(parents=True)
    os.utime(empty, (now - 120, now - 120))
    os.utime(empty.parent, (now - 120, now - 120))
    result = sweep(tmp_path, cap_bytes=2000, age_s=600, now=now, keep={kept})
    assert result.removed == 0 and result.left == 1010  # the kept file counts but is never deleted
    assert _names(tmp_path) == {"kept", "new"}
    assert not (tmp_path / "gone").exists()  # empty folders go, deepest first
    # A 0-byte file Gradio never lists (its upload parser's leftover) is swept by age like any other.
    _file(tmp_path / "tmpabc", 0, 900, now)
    assert sweep(tmp_path, cap_bytes=2000, age_s=600, now=now, keep={kept}).removed == 1


def test_the_budget_admits_uploads_while_they_fit_and_sweeps_the_oldest_to_make_room(tmp_path):
    now = time.time()
    _file(tmp_path / "old", 600, 100, now)
    budget = DiskCap(tmp_path, cap_bytes=1000, age_s=3600)
    assert budget.sweep().left == 600
    assert budget.admit(300) and budget.used == 900
    assert budget.admit(500)  # does not fit: the oldest file goes to make room
    assert not (tmp_path / "old").exists() and budget.used == 500
    assert not budget.admit(2000)  # larger than the cap itself
    pinned = _file(tmp_path / "pinned", 900, 100, now)
    budget.keep = lambda: {pinned}
    assert budget.sweep().left == 900  # the periodic sweep measures the folder again
    assert not budget.admit(200)  # the rest (a file it may not delete and the newest) leaves no room: refused
    assert (tmp_path / "pinned").exists()
    assert DiskCap(None).admit(10**12)  # no folder configured (tests, a direct call): nothing to bound


def test_the_upload_rate_gives_a_burst_then_bytes_per_second_per_address():
    rate = UploadRate(bytes_per_s=1 * MB, burst_bytes=4 * MB)
    assert rate.take("a", 3 * MB, now=0.0) == 0.0
    assert rate.take("a", 2 * MB, now=0.0) == pytest.approx(1.0)  # 1 MB left: a second to wait for the next 1 MB
    assert rate.take("b", 3 * MB, now=0.0) == 0.0  # another address has its own bucket
    assert rate.take("a", 2 * MB, now=1.0) == 0.0  # refilled at 1 MB/s
    assert rate.take("a", 5 * MB, now=100.0) == math.inf  # more than the burst never fits
    # A tiny upload still costs a file and a folder: it is counted as UPLOAD_MIN_CHARGE bytes.
    small = UploadRate(bytes_per_s=1.0, burst_bytes=disk_cap.UPLOAD_MIN_CHARGE)
    assert small.take("c", 1, now=0.0) == 0.0 and small.take("c", 1, now=0.0) > 0


def test_the_upload_rate_forgets_addresses_whose_bucket_refilled():
    rate = UploadRate(bytes_per_s=1 * MB, burst_bytes=4 * MB, max_keys=10)
    for i in range(50):
        rate.take(f"10.0.0.{i}", MB, now=float(i))  # each refills within 1 s of the next one's arrival
    assert len(rate._buckets) <= 11


def _post(make, size: int | None, path: str = "/gradio_api/upload", forwarded: str | None = None):
    """One POST from 127.0.0.1 through the middleware `make(app)` builds: (status, body, whether the app behind it
    was reached)."""
    reached = []

    async def app(scope, receive, send):
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    headers = {} if size is None else {"content-length": str(size)}
    if forwarded:
        headers["x-forwarded-for"] = forwarded
    sent = asgi_request(make(app), "POST", path, headers=headers)
    return sent[0]["status"], sent[-1]["body"].decode(), bool(reached)


def test_the_upload_middleware_refuses_before_gradio_reads_a_byte(tmp_path):
    budget = DiskCap(tmp_path, cap_bytes=100 * MB, age_s=600)
    rate = UploadRate(bytes_per_s=1 * MB, burst_bytes=8 * MB)

    def make(app):
        return UploadLimitMiddleware(app, disk=budget, rate=rate, max_bytes=5 * MB)

    assert _post(make, 4 * MB)[::2] == (200, True)
    status, body, reached = _post(make, None)
    assert (status, reached) == (411, False) and "Content-Length" in body
    status, body, reached = _post(make, 6 * MB)
    assert (status, reached) == (413, False) and "at most 5.0 MB" in body
    status, body, reached = _post(make, 5 * MB)  # 4 MB of the burst left, then 1 MB/s
    assert (status, reached) == (429, False) and "Try again in 1 s" in body
    # Behind a proxy (a private peer, as on a Space) each forwarded address has its own rate.
    assert _post(make, 4 * MB, forwarded="203.0.113.7")[::2] == (200, True)
    assert budget.used == 8 * MB  # what was let in is counted until the next sweep measures the folder
    assert _post(make, 10 * MB, path="/gradio_api/queue/join")[::2] == (200, True)  # other paths pass untouched


def test_the_upload_middleware_refuses_when_the_cap_cannot_make_room(tmp_path):
    now = time.time()
    pinned = _file(tmp_path / "pinned", 3 * MB, 10, now)
    budget = DiskCap(tmp_path, cap_bytes=4 * MB, age_s=600, keep=lambda: {pinned})
    budget.sweep()  # what the periodic sweep does first

    def make(app):
        return UploadLimitMiddleware(app, disk=budget, rate=UploadRate(), max_bytes=5 * MB)

    assert _post(make, MB // 2)[::2] == (200, True)
    status, body, reached = _post(make, 2 * MB)  # 3 MB that may not be deleted + 2 MB > 4 MB
    assert (status, reached) == (507, False) and "full" in body


def test_the_app_installs_the_upload_middleware_and_the_launch_flags_have_space_defaults():
    from app.page.launch import build_parser
    from app.page.serving import launch_kwargs

    args = build_parser().parse_args([])
    assert args.disk_cap_mb == 2048 and args.upload_mb_per_second == 2
    kinds = [m.cls for m in launch_kwargs(_FakeDemo())["app_kwargs"]["middleware"]]
    assert UploadLimitMiddleware in kinds


class _FakeDemo:
    fns: dict = {}


def test_a_call_refused_by_gradios_input_checks_logs_one_line_without_its_values(monkeypatch):
    monkeypatch.setattr(server_text, "REFUSED", server_text.RefusalLog())
    value = "9" * 200_000
    code = compile(
        "def preprocess_data(v):\n    raise ValueError(f'Value: {v} is not in the list of choices')\n",
        os.path.join("site-packages", "gradio", "blocks.py"),
        "exec",
    )
    scope: dict = {}
    exec(code, scope)

    class Fn:
        api_name = "run"

    from gradio.route_utils import Request

    asgi = SimpleNamespace(client=SimpleNamespace(host="10.1.2.3"), headers={})

    def call_process_api(fn, v, gr_request=Request(request=asgi, session_hash="s")):
        scope["preprocess_data"](v)

    out = io.StringIO()
    for _ in range(50):  # malformed calls in a row: one line, the rest counted with the next (the refusal log)
        try:
            call_process_api(Fn(), value)
        except ValueError:
            server_text.print_exc(file=out)
    assert out.getvalue() == "[poss] refused: /run: its inputs did not pass the checks, from 10.1.2.3\n"
    # A fault elsewhere keeps its trace, each line cut short.
    out = io.StringIO()
    try:
        raise RuntimeError(value)
    except RuntimeError:
        server_text.print_exc(file=out)
    text = out.getvalue()
    assert "Traceback" in text and "RuntimeError" in text and len(text) < 3000


def test_a_handlers_own_refusal_logs_one_line_and_a_refused_save_no_trace(capsys, monkeypatch):
    """gr.Error is a message to the user (Save with nothing to save, a tab whose run was freed): no trace."""
    import gradio as gr

    monkeypatch.setattr(server_text, "REFUSED", server_text.RefusalLog())

    class Fn:
        api_name = "save_run"

    def call_process_api(fn):
        saved_files.save_handler(request=None)

    out = io.StringIO()
    try:
        call_process_api(Fn())
    except gr.Error:
        server_text.print_exc(file=out)
    assert out.getvalue() == "[poss] refused: /save_run: the user was told why, from ?\n"


def test_install_routes_gradios_traces_through_the_quiet_printer():
    import gradio.queueing

    server_text.install()
    assert gradio.queueing.traceback.print_exc is server_text.print_exc
    assert gradio.queueing.traceback.format_exc() is not None  # the rest of the module is still there


def test_messages_name_no_server_folder():
    from poss_core.models.default_model import cache_root

    text = f"could not load target '{cache_root()}/smollm2-135m-instruct' (local folder): no config"
    shown = server_text.neutral_paths(text)
    assert str(cache_root()) not in shown and "<the model cache>/smollm2-135m-instruct" in shown
    assert server_text.neutral_paths("depth 20 is out of range") == "depth 20 is out of range"

    from app.views.token_html import status_html

    assert str(cache_root()) not in status_html(text, "error")


def test_the_hardware_record_names_a_prepared_model_by_its_folder_not_the_cache_path(monkeypatch, tmp_path):
    from poss_core.models.default_model import prepared_dir
    from poss_core.models.hardware import model_label

    monkeypatch.setenv("POSS_CACHE_DIR", str(tmp_path / "cache"))
    shown = model_label(str(prepared_dir()))
    assert shown == "smollm2-135m-instruct (prepared in the model cache)" and str(tmp_path) not in shown
    assert model_label("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_bitsandbytes_warning_is_logged_once_per_process():
    from poss_core.models.quantization import BNB_LOGGERS, warn_once

    warn_once(*BNB_LOGGERS)
    warn_once(*BNB_LOGGERS)  # idempotent: one filter per logger
    logger = logging.getLogger(BNB_LOGGERS[0])
    assert len(logger.filters) == 1
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger.addHandler(handler)
    try:
        for _ in range(500):
            logger.warning("MatMul8bitLt: inputs will be cast from %s to float16 during quantization", "torch.float32")
        logger.warning("MatMul8bitLt: inputs will be cast from %s to float16 during quantization", "torch.bfloat16")
    finally:
        logger.removeHandler(handler)
    assert out.getvalue().count("\n") == 2


def test_an_over_long_integer_in_a_saved_run_is_a_refusal_not_a_fault(tmp_path):
    from poss_core.base.errors import PossError
    from poss_core.runtime.saved_runs import load_run

    path = tmp_path / "big.jsonl"
    path.write_text('{"type": "run", "x": ' + "1" * 100_000 + "}\n")
    with pytest.raises(PossError, match="line 1 is not JSON.*too long"):
        load_run(path)


def test_a_cancelled_compare_takes_its_workers_exception(capsys):
    from app.actions.api import _retrieved

    async def main():
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, lambda: 1 / 0)
        future.add_done_callback(_retrieved)
        await asyncio.sleep(0.2)
        del future

    asyncio.run(main())
    import gc

    gc.collect()
    assert "never retrieved" not in capsys.readouterr().err


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
