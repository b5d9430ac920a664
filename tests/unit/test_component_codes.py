"""Every component change carries its reason code: started, exited, given up (worker_fatal
for the worker role), held, stopped, spawn and probe failures, adoption."""

from __future__ import annotations

from dataclasses import replace

from xce_agent.supervision import machine as m
from xce_agent.supervision.spec import ComponentSpec, ProbeKind, ProbeSpec, RestartSpec
from xce_protocol.reasons import Reason

RESTART = RestartSpec(initial_delay=1.0, delay=1.0, give_up_starts=3, give_up_window=60.0)
WORKER = ComponentSpec(
    name="w", command=("/bin/true",), role="worker", restart=RESTART,
    decommission_exit_codes=frozenset({100}),
)  # fmt: skip


def run(spec: ComponentSpec, *events: m.Event, now: float = 0.0) -> m.ComponentState:
    state = m.ComponentState()
    for n, event in enumerate(events):
        state = m.step(spec, state, event, now + n).state
    return state


def test_start_exit_backoff_and_give_up() -> None:
    assert run(WORKER, m.Start()).code == Reason.COMPONENT_STARTED
    exited = run(WORKER, m.Start(), m.Spawned(1), m.Exited(3, None, 1))
    assert exited.phase is m.Phase.BACKOFF and exited.code == Reason.COMPONENT_EXITED
    loop: list[m.Event] = [m.Start(), m.Spawned(1), m.Exited(3, None, 1)]
    for pid in (2, 3):
        loop += [m.Timer(), m.Spawned(pid), m.Exited(3, None, pid)]
    given_up = run(WORKER, *loop)
    assert given_up.phase is m.Phase.FATAL and given_up.code == Reason.WORKER_FATAL
    proxy = replace(WORKER, role="reverse-proxy")
    assert run(proxy, *loop).code == Reason.COMPONENT_FATAL


def test_held_stopped_spawn_failure_adoption() -> None:
    held = run(WORKER, m.Start(), m.Spawned(1), m.Exited(100, None, 1))
    assert held.phase is m.Phase.HELD and held.code == Reason.WORKER_HELD
    stop = m.Stop("decommissioned: x", Reason.WORKER_STOPPED_DECOMMISSIONED)
    stopping = run(WORKER, m.Start(), m.Spawned(1), stop)
    assert stopping.code == Reason.WORKER_STOPPED_DECOMMISSIONED
    assert run(WORKER, m.Start(), m.Spawned(1), m.Stop()).code == Reason.COMPONENT_STOPPED
    failed = run(WORKER, m.Start(), m.SpawnFailed("no such file"))
    assert failed.code == Reason.COMPONENT_SPAWN_FAILED
    assert run(WORKER, m.Adopted(5, 0.0)).code == Reason.COMPONENT_ADOPTED


def test_probe_failure() -> None:
    probe = ProbeSpec(ProbeKind.TCP, host="127.0.0.1", port=1, initial_delay=0, failure_threshold=1)
    spec = replace(WORKER, liveness=probe)
    state = run(spec, m.Start(), m.Spawned(1), m.Timer(), m.ProbeResult(False, "refused"))
    assert state.phase is m.Phase.STOPPING and state.code == Reason.COMPONENT_PROBE_FAILED
