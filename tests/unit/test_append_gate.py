"""The append lock's gate (store/append_gate.py) and the tries of a change it refused
(http/replicas.py): one wait on the event loop for a stuck lock, then tries without waiting,
one per PROBE_EVERY, the others refused at once; refused changes tried again after a pause
for a bounded time, without using up the tries kept for changes another replica overtook."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any, cast

import psycopg
import pytest

from xce_controller.http import replicas
from xce_controller.store.append_gate import PROBE_EVERY, AppendGate
from xce_controller.store.base import LockBusy, StaleState


class Cursor:
    def __init__(self, granted: bool = True, times_out: bool = False) -> None:
        self.sent: list[str] = []
        self.granted, self.times_out = granted, times_out

    def execute(self, sql: str, params: Any = ()) -> None:
        self.sent.append(sql.split("(", maxsplit=1)[0])
        if self.times_out and "pg_advisory_xact_lock" in sql:
            raise psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")

    def fetchone(self) -> tuple[bool]:
        return (self.granted,)


def _take(gate: AppendGate, cur: Cursor) -> None:
    gate.take(cast("psycopg.Cursor[Any]", cur))


def _stuck(gate: AppendGate) -> bool:
    return gate.stuck


def test_one_wait_runs_out_then_the_lock_is_tried_without_waiting_until_taken() -> None:
    now = [100.0]
    gate = AppendGate(7, lambda: now[0])
    cur = Cursor()
    _take(gate, cur)  # free: the waiting lock, as always
    assert cur.sent == ["SELECT pg_advisory_xact_lock"] and not _stuck(gate)
    with pytest.raises(psycopg.errors.LockNotAvailable):
        _take(gate, Cursor(times_out=True))  # the lock timeout ran out: the store says LockBusy
    assert _stuck(gate)
    held = Cursor(granted=False)
    with pytest.raises(LockBusy):
        _take(gate, held)
    assert held.sent == ["SELECT pg_try_advisory_xact_lock"]  # tried, without waiting
    soon = Cursor()
    now[0] += PROBE_EVERY / 2
    with pytest.raises(LockBusy):
        _take(gate, soon)
    assert soon.sent == []  # refused at once: not even a round trip
    assert gate.refused == 2
    now[0] += PROBE_EVERY
    free = Cursor(granted=True)
    _take(gate, free)  # the holder let go: taken, and the gate is open again
    assert free.sent == ["SELECT pg_try_advisory_xact_lock"] and not _stuck(gate)
    after = Cursor()
    _take(gate, after)
    assert after.sent == ["SELECT pg_advisory_xact_lock"]


class Replica:
    async def current(self) -> None:
        return None


class Ctl:
    replica = Replica()


def _run(refusals: list[Exception]) -> tuple[int, list[int]]:
    """The status a client gets, and how often the app ran, when it raises `refusals` in turn."""
    ran: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        ran.append(1)
        if refusals:
            raise refusals.pop(0)
        await send({"type": "http.response.start", "status": 200, "headers": []})

    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    catch_up = replicas.CatchUp(app, Ctl())  # type: ignore[arg-type]
    asyncio.run(catch_up({"type": "http"}, receive, send))
    return int(sent[0]["status"]), ran


def test_lock_refusals_are_tried_again_after_a_pause_and_do_not_use_up_the_tries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replicas, "LOCK_PAUSE", 0.001)
    monkeypatch.setattr(replicas, "BACKOFF_MAX", 0.001)
    many = [LockBusy("stuck") for _ in range(replicas.RETRIES * 2)]
    status, ran = _run([*many, StaleState("overtaken")])
    assert (status, len(ran)) == (200, replicas.RETRIES * 2 + 2)
    status, ran = _run([StaleState("overtaken") for _ in range(replicas.RETRIES + 5)])
    assert (status, len(ran)) == (503, replicas.RETRIES + 1)  # the tries, then the busy answer


def test_a_lock_that_stays_stuck_is_answered_busy_after_its_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(replicas, "LOCK_PAUSE", 0.01)
    monkeypatch.setattr(replicas, "LOCK_RETRY_FOR", 0.2)
    status, ran = _run([LockBusy("stuck") for _ in range(1000)])
    assert status == 503
    assert 5 < len(ran) < 60  # about LOCK_RETRY_FOR / LOCK_PAUSE tries, then let go
