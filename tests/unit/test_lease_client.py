"""Which lease answers the agent trusts, and the fence wrapped around a singleton's command."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from xce_agent.controller.lease_client import interpret
from xce_agent.core import lease_holder as lh
from xce_agent.singletons.runner import fenced
from xce_agent.supervision.spec import ComponentSpec, SingletonSpec
from xce_protocol.protocol import Identity, classify

ME = Identity("h1", "i-1")
HELD = {
    "protocol": "1.1",
    "lease": "prov",
    "state": "held",
    "host": "h1",
    "session": "s1",
    "token": 4,
}


def event(status: int, body: Any) -> lh.Event:
    return interpret(classify(status, body, ME), "prov", "s1", 7.0)


def test_a_grant_of_this_lease_to_this_run() -> None:
    assert event(200, HELD) == lh.Granted(7.0, 4)


@pytest.mark.parametrize(
    "changes",
    [
        {"lease": "other"},
        {"session": "s2"},
        {"host": "h2"},
        {"state": "free"},
        {"token": True},
        {"token": 0},
        {"token": "4"},
        {"protocol": "2.0"},
    ],
)
def test_anything_else_that_looks_like_a_grant_is_a_failure(changes: dict[str, Any]) -> None:
    assert isinstance(event(200, {**HELD, **changes}), lh.Failed)


def test_another_holder_and_other_refusals() -> None:
    busy = {"protocol": "1.1", "error": "lease_held", "message": "held by h2", "expires_in": 1.5}
    got = event(409, busy)
    assert isinstance(got, lh.Denied) and got.retry_in == 1.5 and "held by h2" in got.detail
    assert event(409, {**busy, "expires_in": float("inf")}) == lh.Denied(7.0, got.detail, 0.0)
    for status, body in [
        (401, {"protocol": "1.1", "error": "unknown_credential", "message": "join again"}),
        (500, {"protocol": "1.1"}),
        (200, "garbage"),
        (
            410,
            {
                "protocol": "1.1",
                "error": "decommissioned",
                "host": "h1",
                "instance_id": "i-1",
                "reason": "gone",
            },
        ),
    ]:
        assert isinstance(event(status, body), lh.Failed), (status, body)


def test_a_singleton_runs_under_its_fence() -> None:
    spec = ComponentSpec(
        "p",
        ("/bin/prov", "--x"),
        stop_signal=2,
        stop_timeout=1.5,
        singleton=SingletonSpec("prov", 5.0),
    )
    wrapped = fenced(spec)
    assert wrapped.command == (
        sys.executable,
        "-m",
        "xce_agent.singletons.fence",
        "--stop-signal",
        "2",
        "--stop-timeout",
        "1.5",
        "--",
        "/bin/prov",
        "--x",
    )
    plain = ComponentSpec("w", ("/bin/w",))
    assert fenced(plain) is plain
