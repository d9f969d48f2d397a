"""The line of live runs is fair: addresses take turns, then sessions within an address, and the wait a run is told
is the expected seconds of the runs ahead of it (each at most the per-call cap), not a constant per place."""

from __future__ import annotations

import time

import pytest

from app.server import client_share, live_queue


def started(q: live_queue.LiveQueue) -> list[int]:
    """Start the line one run at a time (each ending at once), returning the tickets in the order they started."""
    order = []
    while q.counts()[1]:
        nxt = next(t for t in list(q._waiting) if q.try_start(t))
        order.append(nxt)
        q.leave(nxt)
    return order


def test_a_flood_from_one_address_waits_behind_every_other_addresss_next_call():
    q = live_queue.LiveQueue(slots=1, max_waiting=64)
    busy = q.join(10, "s0", "10.0.0.1")
    assert q.try_start(busy)
    flood = [q.join(10, f"f{i}", "10.0.0.1") for i in range(6) for _ in range(2)]  # six tabs, two calls each
    victim = q.join(10, "v", "198.51.100.7")
    other = q.join(10, "w", "203.0.113.9")
    # 10.0.0.1 was served last (busy): the two addresses never served go first, in arrival order.
    assert q.place(victim) == 1 and q.place(other) == 2
    assert q.place(flood[0]) == 3
    q.leave(busy)
    order = started(q)
    assert order[:2] == [victim, other]
    # Within the flood's address its tabs take turns: each tab's first call before any tab's second.
    firsts, seconds = flood[0::2], flood[1::2]
    assert order[2:] == firsts + seconds


def test_addresses_alternate_and_a_session_joining_again_does_not_jump_the_line():
    q = live_queue.LiveQueue(slots=1, max_waiting=64)
    a = [q.join(1, "a", "A") for _ in range(3)]
    b = [q.join(1, "b", "B") for _ in range(3)]
    assert [q.place(t) for t in a + b] == [1, 3, 5, 2, 4, 6]  # A came first, then the two alternate
    assert q.try_start(a[0]) and not q.try_start(a[1])
    q.leave(a[0])
    assert q.place(b[0]) == 1 and q.place(a[1]) == 2  # A was just served: B's turn
    q.leave(a[1])  # A's next call gives up; joining again puts it back in A's turn, not at the front
    again = q.join(1, "a", "A")
    assert q.place(b[0]) == 1 and q.place(a[2]) == 2 and q.place(again) > q.place(b[1])


def test_the_wait_counts_the_expected_seconds_of_the_calls_ahead_capped():
    q = live_queue.LiveQueue(slots=1, max_waiting=64, typical_s_per_unit=0.1, cap_s=20.0)
    running = q.join(512, "r", "A")
    q.try_start(running)
    small = [q.join(8, f"s{i}", "A") for i in range(3)]  # 0.8 s each
    big = [q.join(512, f"b{i}", "A") for i in range(3)]  # 51 s of work each, stopped at the 20 s cap
    assert q.hold_s(8) == pytest.approx(0.8) and q.hold_s(512) == 20.0
    # The running call has up to the cap left; then the calls ahead, each its own expected seconds.
    assert q.estimate_s(small[0]) == pytest.approx(20.0, abs=0.2)
    assert q.estimate_s(big[0]) == pytest.approx(20.0 + 3 * 0.8, abs=0.2)
    assert q.estimate_s(big[2]) == pytest.approx(20.0 + 3 * 0.8 + 2 * 20.0, abs=0.2)
    assert q.estimate_s(big[2]) - q.estimate_s(small[2]) > 10 * (q.estimate_s(small[2]) - q.estimate_s(small[1]))


def test_a_run_stopped_at_the_cap_does_not_make_the_rate_look_fast():
    q = live_queue.LiveQueue(slots=1, typical_s_per_unit=0.01, cap_s=1.0)
    t = q.join(100, "a", "A")
    q.try_start(t)
    q._running[t] = time.monotonic() - 1.0  # it held its slot for the whole cap with 100 units asked for
    q.leave(t)
    assert q.rate() >= 0.01 - 1e-9  # it did part of its work in 1 s: at least 0.01 s per unit, never less
    assert q.hold_s(100) == pytest.approx(1.0, abs=0.05)
    t2 = q.join(10, "a", "A")
    q.try_start(t2)
    q._running[t2] = time.monotonic() - 0.05  # a run that finished its 10 units in 0.05 s
    q.leave(t2)
    assert q.rate() >= 0.01  # the capped run still sets the floor
    assert "each at most 1 s" in q.status(q.join(1, "b", "B"))


def test_runs_stopped_at_the_cap_count_the_time_they_held_their_slot_past_it():
    q = live_queue.LiveQueue(slots=1, typical_s_per_unit=0.1, cap_s=4.0)
    assert q.overrun_s() == 0.0 and q.hold_s(512) == 4.0  # nothing ended at the cap yet: the cap
    for held in (6.0, 5.0):  # each stopped at the cap, then finished its round and its answer
        t = q.join(512, "a", "A")
        q.try_start(t)
        q._running[t] = time.monotonic() - held
        q.leave(t)
    assert q.overrun_s() == pytest.approx(1.5, abs=0.05) and q.hold_s(512) == pytest.approx(5.5, abs=0.05)
    running = q.join(512, "a", "A")
    q.try_start(running)
    q._running[running] = time.monotonic() - 4.5  # past the cap, within what capped runs took
    waiting = q.join(4, "b", "B")
    assert q.estimate_s(waiting) == pytest.approx(1.0, abs=0.1)
    assert q.hold_s(4) == pytest.approx(4 * q.rate())  # a run expected to end before the cap is not lengthened


def test_an_address_has_a_share_by_default_that_a_class_behind_one_nat_fits_in():
    share_ = client_share.ClientShare()  # the defaults `python app.py` starts with
    assert share_.per_client == 2 and 30 <= share_.per_address <= 40
    for student in range(30):  # a class of thirty behind one address, a call each
        assert share_.join(f"student{student}", "203.0.113.1") is None
    for extra in range(share_.per_address - 30):
        assert share_.join(f"extra{extra}", "203.0.113.1") is None
    refused = share_.join("one-more", "203.0.113.1")  # fresh sessions cannot grow one address's share past it
    assert refused and "your address" in refused
    assert share_.join("elsewhere", "198.51.100.2") is None  # another address is not held up by it


def test_calls_joining_later_pass_a_waiting_call_at_most_passed_max_times():
    # A returning visitor waits behind a stream of addresses never served: each new address would sort first by
    # turns alone; after PASSED_MAX of them the visitor goes next, however many more arrive.
    q = live_queue.LiveQueue(slots=1, max_waiting=64)
    first = q.join(1, "r", "198.51.100.7")
    assert q.try_start(first)
    q.leave(first)  # the visitor was served once
    visitor = q.join(1, "r", "198.51.100.7")
    stream = [q.join(1, f"n{i}", f"10.9.0.{i}") for i in range(20)]  # new addresses, all after the visitor
    assert q.place(visitor) == q.PASSED_MAX + 1
    order = started(q)
    assert order.index(visitor) == q.PASSED_MAX
    assert order[: q.PASSED_MAX] == stream[: q.PASSED_MAX]


def test_a_call_passed_in_the_line_keeps_its_count_while_it_waits():
    q = live_queue.LiveQueue(slots=1, max_waiting=64)
    served = q.join(1, "r", "A")
    assert q.try_start(served)
    q.leave(served)
    waiting = q.join(1, "r", "A")
    for i in range(q.PASSED_MAX):  # one new address at a time, each starting ahead of it
        t = q.join(1, f"n{i}", f"N{i}")
        assert q.place(t) == 1 and q.try_start(t)
        q.leave(t)
    late = q.join(1, "late", "never-served")
    assert q.place(waiting) == 1 and q.place(late) == 2


@pytest.mark.parametrize(
    ("peer", "header", "hops", "address"),
    [
        ("10.0.0.2", "203.0.113.9", 0, "10.0.0.2"),  # no trusted proxy: the header is the client's own words
        ("10.0.0.2", "203.0.113.9", 1, "203.0.113.9"),  # the proxy appended the client's address
        ("10.0.0.2", "6.6.6.6, 203.0.113.9", 1, "203.0.113.9"),  # an entry the client wrote is never used
        ("10.0.0.2", "6.6.6.6, 203.0.113.9, 10.0.0.7", 2, "203.0.113.9"),  # two proxies: the second from the right
        ("10.0.0.2", "203.0.113.9", 2, "10.0.0.2"),  # fewer entries than proxies: the peer
        ("127.0.0.1", "203.0.113.9", 1, "203.0.113.9"),  # a local proxy
        ("8.8.4.4", "203.0.113.9", 1, "8.8.4.4"),  # a public peer is not a proxy of ours
        ("10.0.0.2", None, 1, "10.0.0.2"),
    ],
)
def test_the_client_address_is_the_entry_the_trusted_proxy_appended(peer, header, hops, address):
    assert client_share.client_address(peer, header, hops=hops) == address
