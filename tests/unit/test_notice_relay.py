"""The notice file and signal for components, and the ordered, retried relay to the controller."""

from __future__ import annotations

import json
import os
import pwd
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from xce_agent.config.notice_file import with_notice_file
from xce_agent.controller.notice_sender import NoticeSender
from xce_agent.notices.relay import NoticeRelay
from xce_agent.supervision.spec import ComponentSpec
from xce_protocol.notices import Notice, NoticeKind, NoticeState
from xce_protocol.protocol import Answer, Outcome

SPOT = Notice(NoticeKind.PREEMPTION, "aws", "aws-spot", 2000.0, raw='{"action": "stop"}')


def spec(name: str, sig: int | None = signal.SIGUSR1, user: str | None = None) -> ComponentSpec:
    return ComponentSpec(name, ("true",), role="worker", notice_signal=sig, user=user)


class Signals:
    def __init__(self, alive: bool = True) -> None:
        self.sent: list[tuple[str, int]] = []
        self.alive = alive

    def __call__(self, name: str, signum: int) -> bool:
        self.sent.append((name, signum))
        return self.alive


def test_the_file_is_written_before_the_signal_and_says_what_came(tmp_path: Path) -> None:
    specs = {s.name: with_notice_file(s, tmp_path) for s in (spec("w"), spec("quiet", None))}
    seen: list[dict[str, Any]] = []

    def send(name: str, signum: int) -> bool:
        seen.append(json.loads(Path(specs[name].environment["XCE_NOTICE_FILE"]).read_text()))
        return True

    relay = NoticeRelay(specs, send, tmp_path, wall=lambda: 1500.0)
    assert relay.relay(SPOT) == ["w"]
    assert seen == [{**SPOT.to_wire(), "received_at": 1500.0}]
    assert not (tmp_path / "notice-quiet.json").exists()
    assert (tmp_path / "notice-w.json").stat().st_mode & 0o777 in (0o600, 0o400)


def test_rebalance_advice_is_not_relayed_and_an_ended_notice_is(tmp_path: Path) -> None:
    signals = Signals()
    relay = NoticeRelay({"w": spec("w")}, signals, tmp_path)
    assert relay.relay(Notice(NoticeKind.REBALANCE, "aws", "r", None)) == []
    ended = Notice(NoticeKind.MAINTENANCE, "gce", "m", None, state=NoticeState.ENDED)
    assert relay.relay(ended) == ["w"] and signals.sent == [("w", signal.SIGUSR1)]


def test_a_component_without_a_process_is_not_counted(tmp_path: Path) -> None:
    relay = NoticeRelay({"w": spec("w")}, Signals(alive=False), tmp_path)
    assert relay.relay(SPOT) == []


def test_an_unwritable_file_means_no_signal(tmp_path: Path) -> None:
    signals = Signals()
    relay = NoticeRelay({"w": spec("w")}, signals, tmp_path / "missing")
    assert relay.relay(SPOT) == [] and signals.sent == []


@pytest.mark.skipif(os.geteuid() != 0, reason="owning a file for another user needs root")
def test_the_file_belongs_to_the_components_user(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    relay = NoticeRelay({"w": spec("w", user="nobody")}, Signals(), tmp_path)
    relay.relay(SPOT)
    info = (tmp_path / "notice-w.json").stat()
    assert (info.st_uid, info.st_mode & 0o777) == (nobody.pw_uid, 0o400)


class FakeClient:
    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.sent: list[dict[str, Any]] = []

    def notice(self, payload: dict[str, Any], timeout: float | None = None) -> Answer:
        self.sent.append(payload)
        return self.answers.pop(0) if self.answers else Answer(Outcome.ACCEPTED, "closed")


def send_all(answers: list[Answer], notices: list[Notice], requests: int) -> FakeClient:
    """Send, and wait until the client saw `requests` requests (the sender is one thread:
    once the last notice went out, every earlier one is settled)."""
    client = FakeClient(answers)
    sender = NoticeSender(client, "i-1", cap=0.01, rand=lambda: 0.0)  # type: ignore[arg-type]
    sender.start()
    for notice in notices:
        sender.send(notice)
    deadline = time.monotonic() + 5
    while len(client.sent) < requests:
        assert time.monotonic() < deadline, client.sent
        time.sleep(0.01)
    sender.stop()
    return client


def test_a_notice_is_retried_while_the_controller_is_unreachable_or_joining() -> None:
    answers = [
        Answer(Outcome.RETRY, "controller unreachable"),
        Answer(Outcome.REFUSED, "HTTP 404 unknown_host: unknown host n1: join first"),
        # Read at boot, before the join's answer: no host credential yet.
        Answer(
            Outcome.REFUSED,
            "HTTP 401 unauthorized: host credential for n1 missing: join first",
            {"error": "unauthorized"},
        ),
        # The controller forgot the credential: the agent is joining again.
        Answer(Outcome.REFUSED, "HTTP 401 unknown_credential: join again"),
        Answer(Outcome.ACCEPTED, "closed"),
    ]
    client = send_all(answers, [SPOT], 5)
    assert [p["event_id"] for p in client.sent] == ["aws-spot"] * 5
    assert client.sent[0]["instance_id"] == "i-1" and client.sent[0]["kind"] == "preemption"


def test_a_refused_notice_is_not_retried_and_order_is_kept() -> None:
    ended = Notice(NoticeKind.PREEMPTION, "aws", "aws-spot", 2000.0, state=NoticeState.ENDED)
    client = send_all([Answer(Outcome.REFUSED, "HTTP 422 bad_request: kind")], [SPOT, ended], 2)
    assert [(p["event_id"], p["state"]) for p in client.sent] == [
        ("aws-spot", "active"),
        ("aws-spot", "ended"),
    ]


def test_a_failed_azure_approval_is_tried_again_at_the_next_drained_answer(
    tmp_path: Path,
) -> None:
    from xce_agent.config.cloud import CloudConfig
    from xce_agent.notices.watching import CloudNotices

    class FakeWatcher:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []
            self.answers = [False, True]  # the platform failed once, then took it

        def acknowledge(self, event_ids: list[str]) -> bool:
            self.calls.append(event_ids)
            return self.answers.pop(0)

    cloud = CloudNotices(CloudConfig("azure"), NoticeRelay({}, Signals(), tmp_path), print)
    watcher = FakeWatcher()
    cloud.watcher = watcher  # type: ignore[assignment]
    cloud.tell_components(Notice(NoticeKind.PREEMPTION, "azure", "E1", 2000.0))

    def approved(times: int) -> None:
        deadline = time.monotonic() + 5
        while len(watcher.calls) < times and time.monotonic() < deadline:
            time.sleep(0.01)
        while cloud._approving and time.monotonic() < deadline:
            time.sleep(0.01)

    cloud.approve("E1")
    approved(1)
    cloud.approve("E1")  # the next answer saying the host is drained
    approved(2)
    cloud.approve("E1")  # settled: not again
    cloud.approve("other")  # never announced: not approved
    time.sleep(0.05)
    assert watcher.calls == [["E1"], ["E1"]]


def test_a_notice_the_controller_holds_but_the_provider_no_longer_announces_is_ended_once(
    tmp_path: Path,
) -> None:
    from xce_agent.config.cloud import CloudConfig
    from xce_agent.notices.observed import Observed
    from xce_agent.notices.watcher import Watcher
    from xce_agent.notices.watching import CloudNotices

    class Source:
        name = "aws spot"
        long_poll = False

        def observe(self) -> list[Observed]:
            return []

    cloud = CloudNotices(CloudConfig("aws"), NoticeRelay({}, Signals(), tmp_path), print)
    watcher = Watcher("aws", [Source()], print, 1.0)
    cloud.watcher = watcher
    assert cloud.stale_end("ev-1", "maintenance") is None  # nothing read yet: cannot tell
    watcher._known.add("aws spot")  # the source was read
    watcher.tracker.update("aws spot", [Observed("live", NoticeKind.PREEMPTION, "")], 1.0)
    assert cloud.stale_end("live", "preemption") is None  # still announced
    assert cloud.stale_end("shutdown-b1", "shutdown") is None  # the OS's, not the provider's
    assert cloud.stale_end("ev-1", "bogus") is None
    ended = cloud.stale_end("ev-1", "maintenance")
    assert ended == Notice(NoticeKind.MAINTENANCE, "aws", "ev-1", None, NoticeState.ENDED)
    assert cloud.stale_end("ev-1", "maintenance") is None  # once
    cloud.tell_components(Notice(NoticeKind.MAINTENANCE, "aws", "ev-1", 5.0))  # back again
    assert cloud.stale_end("ev-1", "maintenance") is not None


def test_a_notice_is_relayed_until_its_deadline_not_only_five_minutes() -> None:
    from xce_agent.controller.notice_sender import GIVE_UP, MAX_RETRY, retry_for

    now = 10_000.0
    assert retry_for(replace_deadline(None), now) == GIVE_UP
    assert retry_for(replace_deadline(now + 60), now) == GIVE_UP  # a spot notice: 5 min
    assert retry_for(replace_deadline(now + 3600), now) == 3600  # maintenance in an hour
    assert retry_for(replace_deadline(now + 30 * 86400), now) == MAX_RETRY
    assert retry_for(replace_deadline(now - 600), now) == GIVE_UP  # already past


def replace_deadline(deadline: float | None) -> Notice:
    return Notice(NoticeKind.MAINTENANCE, "aws", "ev", deadline)
