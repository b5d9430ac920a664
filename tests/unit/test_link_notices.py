"""The link's part in notices: a drained host is reported, the shutdown announced in order."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.test_link import Events, FakeClient, until
from xce_agent.controller import link as lk
from xce_agent.controller.link import ControllerLink
from xce_agent.core import membership as ms
from xce_protocol.protocol import Answer, Outcome


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lk, "HEARTBEAT_BOUNDS", (0.01, 300.0))
    monkeypatch.setattr(lk, "MIN_WATCH_GAP", 0.01)


@pytest.fixture
def rig() -> Iterator[tuple[ControllerLink, FakeClient, Events]]:
    client, events = FakeClient(), Events()
    link = ControllerLink(client, events.post, lambda: {}, lambda: {}, rand=lambda: 0.5)
    yield link, client, events
    link.stop()


def test_a_drained_notice_in_a_host_answer_becomes_an_event(
    rig: tuple[ControllerLink, FakeClient, Events],
) -> None:
    link, client, events = rig
    body = {"host": "n1", "state": "closed", "notice": {"event_id": "E1", "drained": False}}
    client.heartbeat_answer = Answer(Outcome.ACCEPTED, "closed", body)
    link.start()
    until(lambda: client.calls["heartbeat"] >= 3)
    assert events.of(ms.NoticeDrained) == []  # not drained yet: nothing to approve
    drained = {**body, "notice": {"event_id": "E1", "drained": True}}
    client.heartbeat_answer = Answer(Outcome.ACCEPTED, "closed", drained)
    until(lambda: ms.NoticeDrained("E1") in events.of(ms.NoticeDrained))


@pytest.mark.parametrize(
    "garbage", [None, "E1", {"drained": True}, {"event_id": 5, "drained": True}]
)
def test_a_malformed_notice_in_an_answer_is_ignored(
    rig: tuple[ControllerLink, FakeClient, Events], garbage: object
) -> None:
    link, client, events = rig
    body = {"host": "n1", "state": "closed", "notice": garbage}
    client.heartbeat_answer = Answer(Outcome.ACCEPTED, "closed", body)
    link.start()
    until(lambda: client.calls["heartbeat"] >= 3)
    assert events.of(ms.NoticeDrained) == []
    assert events.of(ms.ContactOk)  # the answer itself was taken


def test_shutdown_notice_then_final_report_then_announced(
    rig: tuple[ControllerLink, FakeClient, Events],
) -> None:
    link, client, events = rig
    link.announce_shutdown({"kind": "shutdown"}, 1.0)
    until(lambda: events.of(ms.ShutdownAnnounced))
    assert client.calls["notice"] == 1 and client.calls["heartbeat"] == 1


def test_a_failing_announcement_still_lets_the_stop_go_on(
    rig: tuple[ControllerLink, FakeClient, Events],
) -> None:
    link, client, events = rig

    def broken(payload: object, timeout: float | None = None) -> Answer:
        raise OSError("network is down")

    client.notice = broken  # type: ignore[method-assign]
    link.announce_shutdown({"kind": "shutdown"}, 1.0)
    until(lambda: events.of(ms.ShutdownAnnounced))
