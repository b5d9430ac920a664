"""The per-component lifecycle as a pure state machine.

`step(spec, state, event, now, rand)` returns the next state and the actions the I/O layer
must carry out. It never reads a clock, touches a process or draws a random number: `now`
(monotonic seconds) and `rand` (uniform in [0, 1)) come in with the event, so tests can
drive whole timelines with a fake clock.

Its events and actions are defined in machine_messages.py, the component's state in
component_state.py; all are named here too (`machine.Start`, `machine.Phase`).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, replace

from xce_agent.errors import UnexpectedEvent
from xce_agent.supervision.backoff import is_crash_loop, recent_starts, restart_delay
from xce_agent.supervision.component_state import ComponentState, ExitInfo, Phase
from xce_agent.supervision.machine_messages import (
    Action,
    Adopted,
    DecommissionExit,
    Deferred,
    Event,
    Exited,
    ProbeResult,
    RunProbe,
    SignalGroup,
    Spawn,
    Spawned,
    SpawnFailed,
    Start,
    Stop,
    Timer,
)
from xce_agent.supervision.spec import ComponentSpec, RestartPolicy
from xce_protocol.reasons import Reason

__all__ = [
    "ALLOWED",
    "DEFER_FIRST",
    "DEFER_MAX",
    "Action",
    "Adopted",
    "ComponentState",
    "DecommissionExit",
    "Deferred",
    "Event",
    "ExitInfo",
    "Exited",
    "Phase",
    "ProbeResult",
    "RunProbe",
    "SignalGroup",
    "Spawn",
    "SpawnFailed",
    "Spawned",
    "Start",
    "Stop",
    "Timer",
    "Transition",
    "next_deadline",
    "step",
]


@dataclass(frozen=True)
class Transition:
    state: ComponentState
    actions: tuple[Action, ...] = ()


def next_deadline(state: ComponentState) -> float | None:
    """When the owner must send Timer next, or None."""
    times = [state.deadline] if state.deadline is not None else []
    if state.phase is Phase.RUNNING and state.probe_next is not None and not state.probe_running:
        times.append(state.probe_next)
    return min(times) if times else None


_EVERY_PHASE = frozenset(Phase)
# Where each event may arrive. Commands, timers and probe results (a probe that ran while
# the component was running may answer after a stop) may come in any phase; a spawn's
# outcome only while starting; an adoption only to a fresh component; an exit only while a
# process is tracked (a stale pid's exit is checked against the pid there).
ALLOWED: dict[type, frozenset[Phase]] = {
    Start: _EVERY_PHASE,
    Stop: _EVERY_PHASE,
    Timer: _EVERY_PHASE,
    ProbeResult: _EVERY_PHASE,
    Spawned: frozenset({Phase.STARTING}),
    SpawnFailed: frozenset({Phase.STARTING}),
    Deferred: frozenset({Phase.STARTING}),
    Adopted: frozenset({Phase.STOPPED}),
    Exited: frozenset({Phase.RUNNING, Phase.STOPPING}),
}


def step(
    spec: ComponentSpec, state: ComponentState, event: Event, now: float, rand: float = 0.5
) -> Transition:
    """Apply one event at time `now`; UnexpectedEvent when `ALLOWED` refuses it."""
    if state.phase not in ALLOWED.get(type(event), frozenset()):
        raise UnexpectedEvent(f"{type(event).__name__} while {state.phase.value}")
    if isinstance(event, Start):
        return _start(state, now, event.reason, event.code)
    if isinstance(event, Stop):
        return _stop(spec, state, now, event.reason, event.code)
    if isinstance(event, Spawned):
        return _spawned(spec, state, event.pid, now)
    if isinstance(event, Adopted):
        return _adopted(spec, state, event, now)
    if isinstance(event, SpawnFailed):
        starts = (*recent_starts(state.starts, now, spec.restart.give_up_window), now)
        failed = replace(
            state, last_exit=ExitInfo(None, None, event.error), pid=None, starts=starts
        )
        return _after_exit(spec, failed, now, rand, now, Reason.COMPONENT_SPAWN_FAILED)
    if isinstance(event, Deferred):
        return _deferred(state, event, now)
    if isinstance(event, Exited):
        return _exited(spec, state, event, now, rand)
    if isinstance(event, ProbeResult):
        return _probe_result(spec, state, event, now)
    return _timer(spec, state, now)  # the table lets nothing else through


def _start(state: ComponentState, now: float, reason: str, code: Reason) -> Transition:
    if state.phase in (Phase.RUNNING, Phase.STARTING):
        return Transition(replace(state, wanted=True))
    if state.phase is Phase.STOPPING:
        # A requested restart is no crash: like a start from stopped, it clears the crash-loop
        # count and the backoff (ten `xce-agent restart`s within give_up's window made it FATAL).
        restart = replace(state, wanted=True, restart_after_stop=True, rapid_exits=0, starts=())
        return Transition(restart)
    fresh = replace(state, wanted=True, rapid_exits=0, starts=(), deadline=None)
    if state.phase is Phase.BACKOFF:
        fresh = replace(fresh, rapid_exits=state.rapid_exits, starts=state.starts)
    started = replace(fresh, phase=Phase.STARTING, reason=reason, code=code.value)
    return Transition(started, (Spawn(),))


def _stop(
    spec: ComponentSpec, state: ComponentState, now: float, reason: str, code: Reason
) -> Transition:
    said = code.value
    if state.phase is Phase.RUNNING and state.pid is not None:
        stopping = replace(
            state,
            phase=Phase.STOPPING,
            wanted=False,
            deadline=now + spec.stop_timeout,
            killed=False,
            restart_after_stop=False,
            probe_next=None,
            reason=reason,
            code=said,
        )
        return Transition(stopping, (SignalGroup(state.pid, spec.stop_signal),))
    if state.phase is Phase.STOPPING:
        return Transition(
            replace(state, wanted=False, restart_after_stop=False, reason=reason, code=said)
        )
    if state.phase is Phase.STARTING:
        return Transition(replace(state, wanted=False, reason=reason, code=said))
    if state.phase is Phase.BACKOFF:
        return Transition(
            replace(
                state, phase=Phase.STOPPED, wanted=False, deadline=None, reason=reason, code=said
            )
        )
    return Transition(replace(state, wanted=False))


def _running(
    spec: ComponentSpec, state: ComponentState, pid: int, started: float
) -> ComponentState:
    probe_next = started + spec.liveness.initial_delay if spec.liveness else None
    return replace(
        state,
        phase=Phase.RUNNING,
        pid=pid,
        started_at=started,
        deadline=None,
        killed=False,
        probe_next=probe_next,
        probe_running=False,
        probe_failures=0,
        reason="",
    )


def _spawned(spec: ComponentSpec, state: ComponentState, pid: int, now: float) -> Transition:
    first = not state.starts and state.restarts == 0 and state.last_exit is None
    running = _running(spec, state, pid, now)
    running = replace(
        running,
        starts=(*recent_starts(state.starts, now, spec.restart.give_up_window), now),
        restarts=state.restarts if first else state.restarts + 1,
        deferrals=0,
    )
    if not state.wanted:
        return _stop(spec, running, now, "stop requested while starting", Reason.COMPONENT_STOPPED)
    return Transition(running)


DEFER_FIRST, DEFER_MAX = 0.5, 30.0  # seconds before the first retry of a deferred start, and cap


def _deferred(state: ComponentState, event: Deferred, now: float) -> Transition:
    said = f"not started: {event.error}"
    if not state.wanted:  # stopped while its start waited on the save
        stopped = replace(state, phase=Phase.STOPPED, pid=None, reason=said)
        return Transition(replace(stopped, code=event.code.value))
    delay = min(DEFER_MAX, DEFER_FIRST * 2.0**state.deferrals)
    deferred = replace(
        state,
        phase=Phase.BACKOFF,
        pid=None,
        deadline=now + delay,
        deferrals=state.deferrals + 1,
        reason=f"{said}; retry in {delay:.2f}s",
        code=event.code.value,
    )
    return Transition(deferred)


def _adopted(spec: ComponentSpec, state: ComponentState, event: Adopted, now: float) -> Transition:
    running = _running(spec, replace(state, wanted=True), event.pid, event.started_at)
    if spec.liveness is not None:
        running = replace(running, probe_next=max(now, running.probe_next or now))
    adopted = replace(running, reason="adopted after agent restart")
    return Transition(replace(adopted, code=Reason.COMPONENT_ADOPTED.value))


def _exited(
    spec: ComponentSpec, state: ComponentState, event: Exited, now: float, rand: float
) -> Transition:
    if state.phase not in (Phase.RUNNING, Phase.STOPPING) or state.pid is None:
        return Transition(state)
    if event.pid is not None and event.pid != state.pid:
        return Transition(state)
    info = ExitInfo(event.code, event.signal)
    cleanup: tuple[Action, ...] = (SignalGroup(state.pid, signal.SIGKILL),)
    exited = replace(state, last_exit=info, pid=None, probe_next=None, probe_running=False)
    if state.phase is Phase.STOPPING and not state.restart_after_stop:
        stopped = replace(exited, phase=Phase.STOPPED, deadline=None, killed=False)
        return Transition(stopped, cleanup)
    if event.code is not None and event.code in spec.decommission_exit_codes:
        held = replace(
            exited,
            phase=Phase.HELD,
            deadline=None,
            reason=info.describe(),
            code=Reason.WORKER_HELD.value,
        )
        return Transition(held, (*cleanup, DecommissionExit(event.code)))
    started = state.started_at if state.started_at is not None else now
    result = _after_exit(spec, exited, now, rand, started, Reason.COMPONENT_EXITED)
    return Transition(result.state, cleanup + result.actions)


def _after_exit(
    spec: ComponentSpec,
    state: ComponentState,
    now: float,
    rand: float,
    started: float,
    code: Reason,
) -> Transition:
    policy = spec.restart.policy
    info = state.last_exit
    restart = state.wanted and (
        state.restart_after_stop
        or policy is RestartPolicy.ALWAYS
        or (policy is RestartPolicy.ON_FAILURE and info is not None and info.failed)
    )
    base = replace(
        state,
        deadline=None,
        killed=False,
        restart_after_stop=False,
        reason=info.describe() if info else "",
        code=code.value,
    )
    if not restart:
        reason = info.describe() if info else ""
        return Transition(replace(base, phase=Phase.EXITED, reason=reason))
    rapid = 0 if now - started >= spec.restart.reset_after else state.rapid_exits
    rapid += 1
    if is_crash_loop(spec.restart, state.starts, now):
        window = spec.restart.give_up_window
        reason = f"crash loop: {spec.restart.give_up_starts} starts within {window:g}s"
        fatal = Reason.WORKER_FATAL if spec.role == "worker" else Reason.COMPONENT_FATAL
        return Transition(
            replace(base, phase=Phase.FATAL, rapid_exits=rapid, reason=reason, code=fatal.value)
        )
    delay = restart_delay(spec.restart, rapid, rand)
    if delay <= 0:
        return Transition(replace(base, phase=Phase.STARTING, rapid_exits=rapid), (Spawn(),))
    backoff = replace(base, phase=Phase.BACKOFF, rapid_exits=rapid, deadline=now + delay)
    return Transition(replace(backoff, reason=f"{base.reason}; restart in {delay:.2f}s"))


def _probe_result(
    spec: ComponentSpec, state: ComponentState, event: ProbeResult, now: float
) -> Transition:
    if state.phase is not Phase.RUNNING or spec.liveness is None:
        return Transition(replace(state, probe_running=False))
    probe = spec.liveness
    failures = 0 if event.ok else state.probe_failures + 1
    updated = replace(
        state, probe_running=False, probe_failures=failures, probe_next=now + probe.period
    )
    if failures < probe.failure_threshold:
        return Transition(updated)
    reason = f"liveness probe failed {failures} times: {event.detail}".rstrip(": ")
    stopped = _stop(spec, updated, now, reason, Reason.COMPONENT_PROBE_FAILED)
    return Transition(replace(stopped.state, restart_after_stop=True, wanted=True), stopped.actions)


def _timer(spec: ComponentSpec, state: ComponentState, now: float) -> Transition:
    if state.phase is Phase.BACKOFF and state.deadline is not None and now >= state.deadline:
        return Transition(replace(state, phase=Phase.STARTING, deadline=None), (Spawn(),))
    if (
        state.phase is Phase.STOPPING
        and state.deadline is not None
        and now >= state.deadline
        and state.pid is not None
    ):
        # Escalate once; after SIGKILL only the exit is awaited.
        return Transition(
            replace(state, killed=True, deadline=None), (SignalGroup(state.pid, signal.SIGKILL),)
        )
    if (
        state.phase is Phase.RUNNING
        and state.probe_next is not None
        and now >= state.probe_next
        and not state.probe_running
    ):
        return Transition(replace(state, probe_running=True), (RunProbe(),))
    return Transition(state)
