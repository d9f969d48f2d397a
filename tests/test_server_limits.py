"""Every server limit is declared once (app/server/limits.py): its flag, environment variable, help, default and bounds
all come from that declaration, and the holders start from it."""

from __future__ import annotations

import dataclasses

import pytest

from app.page import launch, server_state
from app.server import body_cap, class_pool, client_share, disk_cap, file_owners, limits, live_queue, tabs
from app.sessions import state


def parse(*flags: str):
    return launch.build_parser().parse_args(list(flags))


def test_every_limit_has_a_flag_and_an_environment_variable():
    declared = {f.name for f, _ in limits.declared()}
    assert declared == {f.name for f in dataclasses.fields(limits.ServerLimits)}
    text = launch.build_parser().format_help()
    for f, flag in limits.declared():
        assert f"--{flag.name}" in text and flag.env in " ".join(text.split()), flag.name


def test_the_help_states_the_declared_default_in_the_flags_unit():
    text = " ".join(launch.build_parser().format_help().split())
    assert "(default 300 seconds; also POSS_MAX_CALL_SECONDS)" in text
    assert "(default 2048 MB; also POSS_DISK_CAP_MB)" in text
    assert "(default 10 minutes; also POSS_IDLE_MINUTES)" in text
    assert "(default 16 replays; also POSS_REPLAY_CONCURRENCY)" in text


def test_a_flag_sets_its_limit_in_the_fields_unit():
    server = launch.server_limits(parse("--idle-minutes", "2", "--disk-cap-mb", "100", "--max-body-mb", "0.5"))
    assert (server.idle_s, server.disk_cap_bytes, server.body_bytes) == (120.0, 100 * limits.MB, limits.MB // 2)
    assert launch.server_limits(parse("--no-call-fits")).call_fits is False
    assert launch.server_limits(parse("--replay-concurrency", "4")).replay_concurrency == 4


def test_the_environment_variable_is_the_flags_default_and_the_flag_wins(monkeypatch):
    monkeypatch.setenv("POSS_DISK_CAP_MB", "100")
    monkeypatch.setenv("POSS_MAX_CALLS_PER_ADDRESS", "7")
    monkeypatch.setenv("POSS_NO_CALL_FITS", "1")
    server = launch.server_limits(parse())
    assert (server.disk_cap_bytes, server.per_address, server.call_fits) == (100 * limits.MB, 7, False)
    assert launch.server_limits(parse("--max-calls-per-address", "3")).per_address == 3


def test_a_malformed_environment_variable_names_itself(monkeypatch):
    monkeypatch.setenv("POSS_QUEUE_SIZE", "many")
    with pytest.raises(SystemExit, match="POSS_QUEUE_SIZE='many'"):
        parse()


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--disk-cap-mb", "10", "--disk-cap-mb=10.0: use a number >= 64."),
        ("--max-calls-per-client", "0", "--max-calls-per-client=0: use a whole number >= 1."),
        ("--concurrency", "65", "--concurrency=65: use a whole number from 1 to 64."),
        ("--max-body-mb", "0", "--max-body-mb=0.0: use a number > 0 and <= 64."),
        ("--idle-minutes", "inf", "--idle-minutes=inf: use a number > 0."),
        ("--max-new-tokens", "4096", "--max-new-tokens=4096: use a whole number from 1 to 2048."),
    ],
)
def test_a_flag_out_of_its_declared_bounds_is_refused_with_what_to_use(flag, value, says):
    assert limits.check_args(parse(flag, value)) == [says]
    with pytest.raises(SystemExit):
        launch.check_flags(parse(flag, value))


def test_the_holders_start_from_the_declared_defaults():
    d = limits.DEFAULTS
    share = client_share.ClientShare()
    assert (share.per_client, share.per_address, share.light_per_client) == (d.per_client, d.per_address, 8)
    assert live_queue.LiveQueue().max_waiting == d.queue_size and class_pool.ClassPool().per_address == 200
    assert disk_cap.DiskCap().cap_bytes == d.disk_cap_bytes and disk_cap.UploadRate().bytes_per_s == 2 * 2**20
    assert file_owners.FileOwners().keep_s == d.saved_run_s and state.SessionStore().idle_s == d.idle_s
    assert tabs.TabWatch(lambda ticket: None).pages_per_address == d.pages_per_address


def test_installed_values_reach_the_new_holders(monkeypatch):
    monkeypatch.setattr(class_pool, "CLASS", class_pool.ClassPool())
    monkeypatch.setattr(server_state, "CLASS", class_pool.CLASS)
    before = (limits.LIMITS, body_cap.BODY_CAP_BYTES)
    try:
        server_state.install(dataclasses.replace(limits.DEFAULTS, class_runs_per_address=3, body_bytes=1000))
        assert class_pool.CLASS.per_address == 3 and body_cap.BODY_CAP_BYTES == 1000
    finally:
        server_state.install(before[0])
    assert body_cap.BODY_CAP_BYTES == before[1]
