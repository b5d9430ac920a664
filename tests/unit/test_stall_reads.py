"""The pieces that keep a replica's loop free of a stalled database: the stall watch (a fresh
grace once the controller could not hear its hosts), the shared reads (one read serves every
request that arrived before it began), the store's watchdog (a call past its deadline cut)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from xce_controller.shared_reads import SharedReads
from xce_controller.stall_watch import STALL, StallWatch, first_look
from xce_controller.store.pg_deadline import Watchdog


def test_a_stall_is_one_gap_past_the_bound_and_counts_only_while_hearing() -> None:
    now = [100.0]
    hearing = [True]
    watch = StallWatch(lambda: hearing[0], lambda: now[0])
    now[0] += STALL - 0.1
    assert watch.ended() == 0.0  # a busy loop's pause is no stall
    now[0] += STALL + 1
    assert watch.ended() == pytest.approx(STALL + 1)
    assert watch.ended() == 0.0  # ended once
    hearing[0] = False  # the store away: ticks on time still hear nothing
    for _ in range(10):
        now[0] += 0.5
        assert watch.ended() == 0.0
    hearing[0] = True
    now[0] += 0.5
    assert watch.ended() == pytest.approx(5.5)  # from the last tick that heard
    assert watch.stalls == 2 and watch.longest == pytest.approx(5.5)


def test_one_read_serves_every_call_that_arrived_before_it_began() -> None:
    began: list[int] = []
    release: list[asyncio.Event] = []

    async def read() -> None:
        began.append(len(began))
        gate = asyncio.Event()
        release.append(gate)
        await gate.wait()

    async def run() -> None:
        reads = SharedReads(read)
        first = reads.after_now()
        await asyncio.sleep(0)
        later = [reads.after_now() for _ in range(50)]  # arrived while the first ran
        assert len({id(f) for f in later}) == 1 and later[0] is not first
        release[0].set()
        await first
        await asyncio.sleep(0)
        assert len(began) == 2 and not later[0].done()  # the next read began after them
        release[1].set()
        await asyncio.gather(*later)
        assert reads.reads == 2 and reads.calls == 51

    asyncio.run(run())


def test_a_failed_read_reaches_its_waiters_and_the_next_call_reads_again() -> None:
    calls = [0]

    async def read() -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise OSError("database away")

    async def run() -> None:
        reads = SharedReads(read)
        with pytest.raises(OSError):
            await reads.after_now()
        await reads.after_now()
        assert calls[0] == 2

    asyncio.run(run())


def test_the_watchdog_cuts_a_call_past_its_deadline_and_leaves_a_finished_one() -> None:
    dog = Watchdog()
    ours, theirs = socket.socketpair()
    other, peer = socket.socketpair()
    try:
        with dog.bound(ours.fileno(), 0.2) as cut:
            began = time.monotonic()
            assert ours.recv(1) == b""  # a peer that never answers: cut, read returns
            took = time.monotonic() - began
        assert cut == [True] and 0.15 < took < 3, took
        with dog.bound(other.fileno(), 0.2) as cut:
            peer.send(b"x")
            assert other.recv(1) == b"x"
        time.sleep(0.4)  # past the deadline of the call that ended: nothing is cut
        peer.send(b"y")
        assert other.recv(1) == b"y" and cut == [False]
        assert dog.cuts == 1
    finally:
        dog.close()
        for s in (ours, theirs, other, peer):
            s.close()


def test_a_host_whose_grace_began_with_everyone_s_is_looked_at_once_early() -> None:
    grace, due = 40.0, 1000.0
    looks = [first_look(due, due - grace, grace, draw / 10) for draw in range(10)]
    assert all(due - grace / 2 <= at <= due for at in looks) and len(set(looks)) == 10
    assert first_look(due, looks[-1], grace, 0.9) == due  # in the last half: at the due itself
