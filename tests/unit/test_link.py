"""The controller link's threads against a fake client: errors, rejoins, the watchdog."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest

from xce_agent.config.agent import ControllerConfig
from xce_agent.controller import link as lk
from xce_agent.controller.credential import HostCredential
from xce_agent.controller.link import ControllerLink, clamp, retry_delay
from xce_agent.core import membership as ms
from xce_protocol.protocol import Answer, Identity, Outcome

E = TypeVar("E")
TEMPLATE = {"name": "default", "slots": 1}
ACCEPTED = Answer(
    Outcome.ACCEPTED,
    "open",
    {
        "host": "n1",
        "state": "open",
        "template": TEMPLATE,
        "heartbeat_interval": 0.01,
        "credential": "host-credential",
        "worker_credential": "worker-credential",
        "incarnation": 1,
    },
)


class FakeClient:
    config = ControllerConfig("http://ctl", timeout=0.5, max_retry_delay=1.0)
    me = Identity("n1", "i-1")

    def __init__(self) -> None:
        self.credential: HostCredential | None = None
        self.lock = threading.Lock()
        self.calls = {"join": 0, "heartbeat": 0, "watch": 0, "notice": 0}
        self.watching = 0
        self.most_watching = 0
        self.heartbeat_answer = Answer(Outcome.ACCEPTED, "open", {"host": "n1", "state": "open"})
        self.stuck = threading.Event()  # set: the next watch hangs until close()
        self.released = threading.Event()
        self.watch_version = 1  # what watch answers say
        self.sinces: list[int] = []  # what the watches asked
        self.watch_answer: Answer | None = None  # set: what every watch answers
        self.together: threading.Barrier | None = None  # set: heartbeat and watch answer at once

    def _count(self, what: str) -> None:
        with self.lock:
            self.calls[what] += 1

    def join(self, payload: dict[str, Any]) -> Answer:
        self._count("join")
        return ACCEPTED

    def heartbeat(self, payload: dict[str, Any], timeout: float | None = None) -> Answer:
        self._count("heartbeat")
        if self.together is not None:
            self.together.wait(10)
        return self.heartbeat_answer

    def notice(self, payload: dict[str, Any], timeout: float | None = None) -> Answer:
        self._count("notice")
        return self.heartbeat_answer

    def watch(self, since: int, wait: float) -> Answer:
        self._count("watch")
        self.sinces.append(since)
        with self.lock:
            self.watching += 1
            self.most_watching = max(self.most_watching, self.watching)
        try:
            if self.stuck.is_set():
                self.stuck.clear()
                self.released.wait(30)  # a hang no deadline ends; only close() does
            else:
                time.sleep(0.02)
        finally:
            with self.lock:
                self.watching -= 1
        if self.watch_answer is not None:
            if self.together is not None:
                self.together.wait(10)
            return self.watch_answer
        body = {"host": "n1", "state": "open", "version": self.watch_version}
        return Answer(Outcome.ACCEPTED, "open", body)

    def close(self) -> None:
        self.released.set()


class Events:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[ms.Event] = []

    def post(self, event: ms.Event) -> None:
        with self.lock:
            self.seen.append(event)

    def of(self, kind: type[E]) -> list[E]:
        with self.lock:
            return [e for e in self.seen if isinstance(e, kind)]


def until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.005)


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lk, "HEARTBEAT_BOUNDS", (0.01, 300.0))
    monkeypatch.setattr(lk, "MIN_WATCH_GAP", 0.01)


@pytest.fixture
def rig() -> Iterator[tuple[ControllerLink, FakeClient, Events, list[float]]]:
    client, events, now = FakeClient(), Events(), [1000.0]
    link = ControllerLink(
        client, events.post, lambda: {}, lambda: {}, rand=lambda: 0.5, clock=lambda: now[0]
    )
    link.start()
    yield link, client, events, now
    link.stop()


def test_an_exception_costs_one_cycle_not_the_thread(
    rig: tuple[ControllerLink, FakeClient, Events, list[float]],
) -> None:
    link, client, events, _ = rig
    until(lambda: client.calls["heartbeat"] >= 2)
    failing = [True]

    def payload() -> dict[str, Any]:
        if failing and failing.pop():
            raise RecursionError("deep")
        return {}

    link.heartbeat_payload = payload
    until(lambda: any("RecursionError" in e.detail for e in events.of(ms.ContactLost)))
    before = client.calls["heartbeat"]
    until(lambda: client.calls["heartbeat"] > before + 2, timeout=10)


def test_rejoins_keep_exactly_one_watch(
    rig: tuple[ControllerLink, FakeClient, Events, list[float]],
) -> None:
    _, client, _, _ = rig
    until(lambda: client.calls["watch"] >= 2)
    threads = threading.active_count()
    client.heartbeat_answer = Answer(Outcome.REFUSED, "HTTP 404 unknown_host: no such host")
    until(lambda: client.calls["join"] >= 20, timeout=10)
    assert client.most_watching == 1
    assert threading.active_count() <= threads


def test_the_watch_asks_from_the_version_the_controller_last_gave(
    rig: tuple[ControllerLink, FakeClient, Events, list[float]],
) -> None:
    # The largest version ever seen used to stick: after one answer with a huge version every
    # later watch asked from it, and the controller held each one past the changes it was for
    # (a decommission made between two watches waited for the next heartbeat).
    _, client, _, _ = rig
    client.watch_version = 10**15
    until(lambda: 10**15 in client.sinces)
    client.watch_version = 3
    until(lambda: client.sinces[-1] == 3)
    client.watch_version = -1  # not a version: the last good one stays
    seen = len(client.sinces)
    until(lambda: len(client.sinces) > seen + 2)
    assert client.sinces[-1] == 3


def test_a_confirmation_the_controller_cannot_answer_is_retried_at_the_interval(
    rig: tuple[ControllerLink, FakeClient, Events, list[float]],
) -> None:
    # A failed confirmation heartbeat used to be retried at once, in a loop: about 250,000
    # a second here, and a busy loop against a real controller that refuses connections.
    link, client, events, _ = rig
    until(lambda: client.calls["heartbeat"] >= 2)
    client.heartbeat_answer = Answer(Outcome.RETRY, "controller unreachable (Connection refused)")
    link.interval = 0.2
    before = client.calls["heartbeat"]
    link.confirm()
    until(lambda: client.calls["heartbeat"] >= before + 3)  # asked at once, then retried
    started = client.calls["heartbeat"]
    time.sleep(1.0)  # measuring a rate over a window, not waiting for a condition
    assert client.calls["heartbeat"] - started <= 8
    assert not events.of(ms.ConfirmedActive)
    client.heartbeat_answer = Answer(Outcome.ACCEPTED, "open", {"host": "n1", "state": "open"})
    until(lambda: len(events.of(ms.ConfirmedActive)) == 1)


def test_the_watchdog_replaces_a_stuck_thread_and_says_so(
    rig: tuple[ControllerLink, FakeClient, Events, list[float]],
) -> None:
    link, client, events, now = rig
    client.stuck.set()
    until(lambda: client.watching == 1 and not client.stuck.is_set())
    assert link.check_threads() == []  # within its bound: left alone
    now[0] += 3600  # the watch has hung for an hour; the heartbeats went on
    before = client.calls["heartbeat"]
    until(lambda: client.calls["heartbeat"] > before + 1)
    assert link.check_threads() == ["watch"]
    stalled = events.of(ms.LinkStalled)
    assert len(stalled) == 1 and "watch thread stuck" in stalled[0].detail
    watches = client.calls["watch"]
    until(lambda: client.calls["watch"] > watches + 2)  # the new thread watches again
    assert link.check_threads() == []


def test_a_decommission_is_posted_once_and_ends_both_loops() -> None:
    client, events = FakeClient(), Events()
    gone = Answer(Outcome.DECOMMISSIONED, "reclaimed", {"instance_id": "i-1", "host": "n1"})
    # Both loops hear the refusal, at the same moment: the heartbeat's and the watch's answer.
    client.heartbeat_answer = client.watch_answer = gone
    client.together = threading.Barrier(2)
    link = ControllerLink(client, events.post, lambda: {}, lambda: {}, rand=lambda: 0.5)
    link.start()
    try:
        until(lambda: events.of(ms.Decommissioned))
        # Silence proven, not waited for: every loop's thread has ended, nothing more is sent.
        loops = link._loops.values()
        until(lambda: all(lp.thread is None or not lp.thread.is_alive() for lp in loops))
        assert client.calls["heartbeat"] == 1 and client.calls["watch"] == 1
        assert events.of(ms.Decommissioned) == [ms.Decommissioned("i-1", "reclaimed")]
    finally:
        link.stop()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1e-6, 1.0),
        (0, 1.0),
        (-5, 1.0),
        (1e9, 300.0),
        (float("nan"), 10.0),
        (float("inf"), 10.0),
        (True, 10.0),
        ("1ms", 10.0),
        (None, 10.0),
        (30, 30.0),
        # Integers too large for a float (JSON has no limit): clamped, not an OverflowError
        # that left a join half taken (credential kept, no template, no worker).
        pytest.param(10**400, 300.0, id="huge-int"),
        pytest.param(-(10**400), 1.0, id="huge-negative-int"),
    ],
)
def test_published_intervals_are_clamped(value: Any, expected: float) -> None:
    assert clamp(value, 10.0, (1.0, 300.0)) == expected


def test_retry_after_is_honoured_but_capped() -> None:
    assert retry_delay(0, 0.5, 30.0, 120.0) == 120.0
    assert retry_delay(0, 0.5, 30.0, 1e9) == lk.RETRY_AFTER_MAX
    assert retry_delay(20, 0.99, 30.0, None) <= 30.0


def test_watch_waits_are_jittered_so_agents_that_start_together_drift_apart() -> None:
    """Before: every watch asked for 30 s, so watches begun together stayed in phase."""
    client, events = FakeClient(), Events()
    waits: list[float] = []
    watch = client.watch

    def recording(since: int, wait: float) -> Answer:
        waits.append(wait)
        return watch(since, wait)

    client.watch = recording  # type: ignore[method-assign]
    draw = [0.0]
    link = ControllerLink(client, events.post, lambda: {}, lambda: {}, rand=lambda: draw[0])
    link.start()
    try:
        until(lambda: len(waits) >= 2)
    finally:
        link.stop()
    assert waits[0] == pytest.approx(lk.WATCH_WAIT * 0.8)  # what the link drew
    draw[0] = 1.0
    assert link.watch_wait() == pytest.approx(lk.WATCH_WAIT * 1.2)
    draw[0] = 0.5
    assert link.watch_wait() == pytest.approx(lk.WATCH_WAIT)
