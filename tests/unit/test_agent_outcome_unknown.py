"""The agent and an answer saying a change's outcome is unknown (`refused_outcome_unknown`):
never a refusal, the worker never stopped, and the call stays on the URL that answered (the
link repeats it there; every agent call is one it may repeat)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.test_link import Events, FakeClient, until
from tests.unit.test_membership import Host
from tests.unit.test_replicas import ME, A, B, Fake, client
from xce_agent.controller import link as lk
from xce_agent.controller.bounded_http import Reply, Target
from xce_agent.controller.link import ControllerLink
from xce_agent.core import membership as ms
from xce_controller.http.errors import storage_answer
from xce_controller.store.base import OutcomeUnknown
from xce_protocol.protocol import Answer, Outcome, classify

# What the controller's own mapping answers (tests may import both sides).
_MAPPED = storage_answer(OutcomeUnknown("did not answer within 5s"))
UNKNOWN = (_MAPPED.status_code, json.loads(bytes(_MAPPED.body)))


class Answers(Fake):
    """The fake transport of test_replicas, with the controller's own unknown-outcome body
    for a port whose answer is ("unknown", status)."""

    def __call__(
        self, target: Target, method: str, path: str, headers: dict[str, str], *rest: Any
    ) -> Reply:
        answer = self.answers[target.port]
        if not isinstance(answer, tuple):
            return super().__call__(target, method, path, headers, *rest)
        with self.lock:
            self.calls.append((target.port, path, rest[1]))
        return Reply(answer[1], UNKNOWN[1], retry_after=1.0)


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lk, "HEARTBEAT_BOUNDS", (0.01, 300.0))
    monkeypatch.setattr(lk, "MIN_WATCH_GAP", 0.01)


def test_the_answer_is_a_failed_contact_never_a_refusal() -> None:
    answer = classify(*UNKNOWN, ME)
    assert answer.outcome is Outcome.RETRY
    assert "outcome_unknown" in answer.detail and "may have been stored" in answer.detail
    as_503 = classify(503, UNKNOWN[1], ME)  # whatever the status a proxy makes of it
    assert as_503.outcome is Outcome.RETRY


@pytest.mark.parametrize("call", ["join", "heartbeat", "notice"])
@pytest.mark.parametrize("status", [UNKNOWN[0], 503])  # the code decides, whatever the status
def test_every_call_stays_on_the_url_that_answered_it(call: str, status: int) -> None:
    fake = Answers({7001: ("unknown", status), 7002: 200})
    ctl = client(fake, A, B)
    answer = getattr(ctl, call)({})
    assert answer.outcome is Outcome.RETRY
    assert [port for port, _, _ in fake.calls] == [7001]  # B was not asked
    assert ctl.url == A
    fake.answers[7001] = 200  # the replica reads its commit back: the repeat is answered there
    assert getattr(ctl, call)({}).outcome is Outcome.ACCEPTED
    assert [port for port, _, _ in fake.calls] == [7001, 7001]
    # A replica that then cannot serve at all is left as before.
    fake.answers[7001] = 503
    assert ctl.heartbeat({}).outcome is Outcome.ACCEPTED and ctl.url == B


@pytest.fixture
def link() -> Iterator[tuple[FakeClient, Events]]:
    fake, events = FakeClient(), Events()
    made = ControllerLink(fake, events.post, lambda: {}, lambda: {}, rand=lambda: 0.5)
    made.start()
    yield fake, events
    made.stop()


def test_the_link_reports_a_lost_contact_and_the_worker_runs_on(
    link: tuple[FakeClient, Events],
) -> None:
    fake, events = link
    until(lambda: fake.calls["heartbeat"] >= 2)
    fake.heartbeat_answer = classify(*UNKNOWN, ME)
    until(lambda: any("outcome_unknown" in e.detail for e in events.of(ms.ContactLost)))
    before = fake.calls["heartbeat"]
    until(lambda: fake.calls["heartbeat"] > before + 2)  # repeated, at its interval
    assert not events.of(ms.Refused) and not events.of(ms.Decommissioned)
    fake.heartbeat_answer = Answer(Outcome.ACCEPTED, "open", {"host": "n1", "state": "open"})
    seen = len(events.of(ms.ContactOk))
    until(lambda: len(events.of(ms.ContactOk)) > seen)
    # What the link posted leaves the worker alone: no action at all.
    host = Host()
    host.boot()
    host.joined()
    lost = [e for e in events.of(ms.ContactLost) if "outcome_unknown" in e.detail]
    assert all(host.send(e) == () for e in lost)
    assert host.send(ms.ContactOk("open")) == ()
