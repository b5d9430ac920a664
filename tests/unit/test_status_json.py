"""`xce-agent status --json` prints the state's times as RFC 3339 in UTC, like the API."""

from __future__ import annotations

from xce_agent.core.pending_notices import PendingNotice
from xce_agent.operator.status_json import with_rfc3339_times
from xce_agent.state import AgentRecord, AgentState, ComponentRecord


def test_every_time_of_the_state_is_rfc3339_and_nothing_else_changes() -> None:
    state = AgentState(
        agent=AgentRecord(7, 1796169600.5, "boot", 1796169601.25, "/etc/xce/agent.yaml"),
        components=(
            ComponentRecord(
                "worker",
                "worker",
                "backoff",
                since=1796169602.0,
                next_retry=1796169660.0,
                identity={"boot_time": 12.5, "pid": 8},
                restarts=3,
            ),
        ),
        updated_at=1796169603.0,
        notices=(PendingNotice("preemption", "aws", "e-1", 1796169720.0, 1796169604.0),),
    )
    shown = with_rfc3339_times(state.to_json())
    assert shown["agent"]["create_time"] == "2026-12-02T00:00:00.500Z"
    assert shown["agent"]["started_at"] == "2026-12-02T00:00:01.250Z"
    [worker] = shown["components"]
    assert (worker["since"], worker["next_retry"]) == (
        "2026-12-02T00:00:02.000Z",
        "2026-12-02T00:01:00.000Z",
    )
    assert worker["started"] is None  # never started: 0 in the state, null here
    assert worker["identity"] == {"boot_time": 12.5, "pid": 8} and worker["restarts"] == 3
    assert shown["updated_at"] == "2026-12-02T00:00:03.000Z"
    [notice] = shown["notices"]
    assert (notice["deadline"], notice["since"]) == (
        "2026-12-02T00:02:00.000Z",
        "2026-12-02T00:00:04.000Z",
    )
    assert shown["controller"]["retry_until"] is None and shown["tombstone"] is None
