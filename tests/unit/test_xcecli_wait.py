"""`--wait`'s decisions from host records, and the names of connection failures."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import requests

from xce_controller.cli.client_errors import ControllerUnreachable, why_unreachable
from xce_controller.cli.waiting import WaitFailed, close_progress, drain_progress, follow

NOW = 1_800_000_000.0


def host(state: str, jobs: int = 0, **more: Any) -> dict[str, Any]:
    return {"name": "n1", "state": state, "jobs_running": jobs, "reason": "why", **more}


@pytest.mark.parametrize(
    ("record", "done", "ok", "line"),
    [
        (host("decommissioned"), True, True, "n1: decommissioned (why)"),
        (host("returned"), True, True, "n1: returned (why)"),
        (host("lost", 1), True, False, "n1: lost before its drain ended (why)"),
        (host("open", 1), True, False, "n1: open before its drain ended (why)"),
        (
            host("draining", 2, drain={"policy": "kill", "deadline": NOW + 245}),
            False,
            False,
            "n1: draining, 2 jobs left",
        ),
    ],
)
def test_drain_progress(record: dict[str, Any], done: bool, ok: bool, line: str) -> None:
    p = drain_progress(record, NOW)
    assert (p.done, p.ok, p.line) == (done, ok, line)


def test_the_drain_countdown_reads_both_time_forms() -> None:
    for deadline in (NOW + 245, "2027-01-15T08:04:05.000Z"):
        p = drain_progress(host("draining", 1, drain={"policy": "kill", "deadline": deadline}), NOW)
        assert p.countdown == "policy kill applies in 4m05s"
    p = drain_progress(host("draining", 1, drain={"policy": "wait", "deadline": None}), NOW)
    assert p.countdown == "no drain deadline (policy wait)"


def test_close_progress() -> None:
    assert close_progress(host("closed", 0), NOW).ok
    assert not close_progress(host("closed", 1), NOW).done
    gone = close_progress(host("draining", 1), NOW)
    assert gone.done and not gone.ok


def test_follow_prints_changes_waits_out_an_outage_and_ends_with_the_outcome() -> None:
    answers: list[Any] = [
        host("draining", 2, drain={"policy": "kill", "deadline": NOW + 60}),
        host("draining", 2, drain={"policy": "kill", "deadline": NOW + 59}),
        ControllerUnreachable("cannot reach http://c: connection refused"),
        ControllerUnreachable("cannot reach http://c: connection refused"),
        host("draining", 1, drain={"policy": "kill", "deadline": NOW + 50}),
        host("decommissioned"),
    ]

    def fetch() -> dict[str, Any]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    lines: list[str] = []
    follow(fetch, drain_progress, lines.append, lambda: NOW, lambda _: None)
    assert lines == [
        "n1: draining, 2 jobs left, policy kill applies in 1m00s",
        "cannot reach http://c: connection refused (still waiting)",
        "n1: draining, 1 job left, policy kill applies in 50s",
        "n1: decommissioned (why)",
    ]
    answers[:] = [host("open", 1)]
    with pytest.raises(WaitFailed, match="n1: open before its drain ended"):
        follow(fetch, drain_progress, lines.append, lambda: NOW, lambda _: None)


def test_a_name_that_does_not_resolve_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_name(*_: Any, **__: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    with pytest.raises(requests.ConnectionError) as caught:
        requests.get("http://controller.example:7870/v1/hosts", timeout=5)
    assert why_unreachable(caught.value) == "name not resolved"
