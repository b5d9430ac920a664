"""The machines name their allowed (state, event) pairs: an event outside the table raises
(never absorbed), and the shells log it with reason code unexpected_event and drop it."""

from __future__ import annotations

import logging
import signal

import pytest

from xce_agent.core import membership as ms
from xce_agent.errors import UnexpectedEvent
from xce_agent.supervision import machine as m
from xce_agent.supervision.spec import ComponentSpec

SPEC = ComponentSpec(name="worker", command=("/bin/true",))
RUNNING = m.ComponentState(phase=m.Phase.RUNNING, pid=42, wanted=True, started_at=0.0)


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (RUNNING, m.SpawnFailed("exec failed")),
        (m.ComponentState(), m.SpawnFailed("exec failed")),
        (RUNNING, m.Spawned(43)),
        (m.ComponentState(phase=m.Phase.FATAL), m.Spawned(43)),
        (RUNNING, m.Adopted(43, 0.0)),
        (m.ComponentState(), m.Exited(42, 0, None)),
        (m.ComponentState(phase=m.Phase.BACKOFF), m.Exited(42, 1, None)),
    ],
)
def test_a_component_event_outside_the_table_raises(
    state: m.ComponentState, event: m.Event
) -> None:
    with pytest.raises(UnexpectedEvent):
        m.step(SPEC, state, event, 1.0)


def test_every_event_type_has_a_row_and_commands_go_anywhere() -> None:
    assert set(m.ALLOWED) == {m.Start, m.Stop, m.Timer, m.ProbeResult, m.Spawned}.union(
        {m.SpawnFailed, m.Deferred, m.Adopted, m.Exited}
    )
    for phase in m.Phase:
        state = m.ComponentState(phase=phase, pid=42 if phase is m.Phase.STOPPING else None)
        m.step(SPEC, state, m.Stop("requested"), 1.0)  # never raises
        m.step(SPEC, state, m.Timer(), 1.0)


def test_the_allowed_pairs_still_run_as_before() -> None:
    started = m.step(SPEC, m.ComponentState(), m.Start("go"), 0.0)
    assert started.state.phase is m.Phase.STARTING
    running = m.step(SPEC, started.state, m.Spawned(42), 0.0)
    assert running.state.phase is m.Phase.RUNNING
    stopping = m.step(SPEC, running.state, m.Stop("bye"), 1.0)
    assert stopping.actions == (m.SignalGroup(42, int(signal.SIGTERM)),)
    stopped = m.step(SPEC, stopping.state, m.Exited(42, 0, None), 2.0)
    assert stopped.state.phase is m.Phase.STOPPED


@pytest.mark.parametrize(
    "event",
    [
        ms.Joined("h", "open", {}),
        ms.ContactOk("h"),
        ms.ContactLost("down"),
        ms.Refused("409"),
        ms.Decommissioned("i-1", "gone"),
        ms.ConfirmedActive(),
    ],
)
def test_a_controller_answer_without_a_controller_raises(event: ms.Event) -> None:
    alone = ms.MembershipState(standing=ms.Standing.NOT_CONFIGURED)
    with pytest.raises(UnexpectedEvent):
        ms.step(alone, event, 1.0)


def test_an_event_type_without_a_rule_raises() -> None:
    class Stray:
        pass

    waiting = ms.MembershipState(standing=ms.Standing.WAITING)
    with pytest.raises(UnexpectedEvent):
        ms.step(waiting, Stray(), 1.0)  # type: ignore[arg-type]


def test_the_supervisor_logs_and_drops_an_unexpected_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from xce_agent.supervision.reactor import Reactor
    from xce_agent.supervision.supervisor import Supervisor

    reactor = Reactor()
    sup = Supervisor([SPEC], reactor)
    before = sup.state("worker")
    with caplog.at_level(logging.ERROR):
        sup._apply("worker", m.Exited(42, 0, None))  # stopped: no process is tracked
    dropped = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 1
    assert getattr(dropped[0], "reason_code", "") == "unexpected_event"
    assert sup.state("worker") == before
    reactor.close()
