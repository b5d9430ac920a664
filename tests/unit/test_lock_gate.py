"""The lock gate (store/lock_gate.py) and the tries of a change it refused
(http/replicas.py): one wait on the event loop for a stuck lock, then one probe per
PROBE_EVERY, the other changes refused at once; refused changes tried again after a pause
for a bounded time, without using up the tries kept for changes another replica overtook."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import pytest

from xce_controller.http import replicas
from xce_controller.store.base import LockBusy, StaleState
from xce_controller.store.lock_gate import PROBE_EVERY, LockGate


def _stuck(gate: LockGate) -> bool:
    return gate.stuck


def test_one_wait_runs_out_then_one_probe_at_a_time_until_one_commits() -> None:
    now = [100.0]
    gate = LockGate(lambda: now[0])
    assert gate.enter() is False  # not stuck: as always
    gate.went_through(False)
    gate.ran_out(False)  # a wait ran out: stuck from now on
    assert _stuck(gate) and gate.refused == 0
    assert gate.enter() is True  # the first change after it probes
    now[0] += PROBE_EVERY / 2
    with pytest.raises(LockBusy):
        gate.enter()  # the next ones, too soon: refused at once
    assert gate.refused == 1
    gate.ran_out(True)  # the probe's short wait ran out too: still stuck
    assert _stuck(gate) and gate.refused == 2
    now[0] += PROBE_EVERY
    assert gate.enter() is True
    gate.went_through(True)  # the probe committed: open again
    assert not _stuck(gate)
    assert gate.enter() is False


LAST_BODY: list[bytes] = []


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
    LAST_BODY[:] = [m.get("body", b"") for m in sent[1:]]
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
    assert b"stayed held for 0.2s" in LAST_BODY[0], LAST_BODY
    assert 5 < len(ran) < 60  # about LOCK_RETRY_FOR / LOCK_PAUSE tries, then let go
