"""The component lifecycle, stepped through timelines with a fake clock."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from xce_agent.supervision import machine as m
from xce_agent.supervision.backoff import restart_delay
from xce_agent.supervision.spec import (
    ComponentSpec,
    ProbeKind,
    ProbeSpec,
    RestartPolicy,
    RestartSpec,
)


def spec(**restart: object) -> ComponentSpec:
    base: dict[str, object] = {
        "initial_delay": 0.0,
        "delay": 1.0,
        "max_delay": 8.0,
        "multiplier": 2.0,
        "jitter": 0.0,
        "reset_after": 10.0,
        "give_up_starts": 5,
        "give_up_window": 60.0,
    }
    base.update(restart)
    return ComponentSpec(
        name="worker",
        command=("/bin/true",),
        stop_timeout=5.0,
        restart=RestartSpec(**base),  # type: ignore[arg-type]
    )


@dataclass
class Driver:
    """Applies events, remembers actions, and plays a fake kernel for spawns."""

    spec: ComponentSpec
    now: float = 0.0
    state: m.ComponentState = field(default_factory=m.ComponentState)
    actions: list[m.Action] = field(default_factory=list)
    next_pid: int = 100

    def send(self, event: m.Event, rand: float = 0.5) -> tuple[m.Action, ...]:
        transition = m.step(self.spec, self.state, event, self.now, rand)
        self.state = transition.state
        self.actions.extend(transition.actions)
        for action in transition.actions:
            if isinstance(action, m.Spawn):
                self.next_pid += 1
                self.send(m.Spawned(self.next_pid))
        return transition.actions

    def phase(self) -> m.Phase:
        return self.state.phase

    def advance(self, seconds: float) -> None:
        self.now += seconds
        deadline = m.next_deadline(self.state)
        if deadline is not None and deadline <= self.now:
            self.send(m.Timer())

    def crash(self, code: int = 1) -> tuple[m.Action, ...]:
        return self.send(m.Exited(code, None, self.state.pid))


def test_start_spawns_and_runs() -> None:
    d = Driver(spec())
    d.send(m.Start())
    assert d.phase() is m.Phase.RUNNING
    assert d.state.pid == 101
    assert d.state.restarts == 0


def test_crash_with_zero_initial_delay_restarts_at_once() -> None:
    d = Driver(spec())
    d.send(m.Start())
    d.now = 1.0
    actions = d.crash()
    assert m.SignalGroup(101, signal.SIGKILL) in actions  # strays of the group are cleaned
    assert d.phase() is m.Phase.RUNNING
    assert d.state.pid == 102
    assert d.state.restarts == 1
    assert d.state.last_exit == m.ExitInfo(1, None)


def test_backoff_grows_exponentially_and_is_capped() -> None:
    d = Driver(spec(give_up_starts=100))
    d.send(m.Start())
    delays = []
    for _ in range(7):
        d.now += 0.1
        d.crash()
        if d.phase() is m.Phase.BACKOFF:
            assert d.state.deadline is not None
            delays.append(round(d.state.deadline - d.now, 3))
            d.advance(d.state.deadline - d.now)
        else:
            delays.append(0.0)
        assert d.phase() is m.Phase.RUNNING
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_stable_uptime_resets_the_backoff() -> None:
    d = Driver(spec(give_up_starts=100))
    d.send(m.Start())
    for _ in range(3):
        d.now += 0.1
        d.crash()
        if d.state.deadline is not None:
            d.advance(d.state.deadline - d.now)
    assert d.state.rapid_exits == 3
    d.now += 10.0  # stayed up reset_after
    d.crash()
    assert d.state.rapid_exits == 1
    assert d.phase() is m.Phase.RUNNING  # initial delay 0 again


def test_jitter_spreads_the_delay_within_bounds() -> None:
    r = RestartSpec(initial_delay=0, delay=4.0, max_delay=100, jitter=0.25)
    assert restart_delay(r, 2, 0.0) == 3.0
    assert restart_delay(r, 2, 0.5) == 4.0
    assert restart_delay(r, 2, 0.999999) < 5.0


def test_crash_loop_gives_up_fatal() -> None:
    d = Driver(spec(give_up_starts=3, give_up_window=60.0))
    d.send(m.Start())
    for _ in range(2):
        d.now += 0.1
        d.crash()
        d.advance(10)
    d.now += 0.1
    d.crash()
    assert d.phase() is m.Phase.FATAL
    assert "crash loop: 3 starts within 60s" in d.state.reason
    assert m.next_deadline(d.state) is None
    d.send(m.Start("operator"))  # an explicit start gives it a fresh chance
    assert d.phase() is m.Phase.RUNNING


def test_requested_restarts_never_count_as_a_crash_loop() -> None:
    """`xce-agent restart NAME` (or a reload that restarts it) is no crash: ten of them within
    give_up's window made a component FATAL ("crash loop: 10 starts within 300s")."""
    d = Driver(spec(give_up_starts=3, give_up_window=60.0))
    d.send(m.Start())
    for _ in range(10):
        d.now += 0.1
        pid = d.state.pid
        assert pid is not None
        d.send(m.Stop("requested"))
        d.send(m.Start("requested"))
        assert d.phase() is m.Phase.STOPPING and d.actions[-1] == m.SignalGroup(pid, 15)
        d.send(m.Exited(None, signal.SIGTERM, pid))
        assert d.phase() is m.Phase.RUNNING and d.state.pid != pid
    assert d.state.restarts == 10
    for _ in range(2):  # crashes still count, from the last requested start on
        d.now += 0.1
        d.crash()
        d.advance(10)
        assert d.phase() is m.Phase.RUNNING
    d.now += 0.1
    d.crash()
    assert d.phase() is m.Phase.FATAL


def test_starts_outside_the_window_do_not_count() -> None:
    d = Driver(spec(give_up_starts=3, give_up_window=5.0, reset_after=1000))
    d.send(m.Start())
    for _ in range(6):
        d.now += 4.0
        d.crash()
        d.advance(100)
        assert d.phase() is m.Phase.RUNNING


def test_policy_on_failure_leaves_a_clean_exit_alone() -> None:
    d = Driver(spec(policy=RestartPolicy.ON_FAILURE))
    d.send(m.Start())
    d.crash(0)
    assert d.phase() is m.Phase.EXITED
    d2 = Driver(spec(policy=RestartPolicy.ON_FAILURE))
    d2.send(m.Start())
    d2.send(m.Exited(None, signal.SIGSEGV, d2.state.pid))
    assert d2.phase() is m.Phase.RUNNING
    assert d2.state.last_exit is not None
    assert d2.state.last_exit.describe() == "killed by SIGSEGV"


def test_policy_never_does_not_restart() -> None:
    d = Driver(spec(policy=RestartPolicy.NEVER))
    d.send(m.Start())
    d.crash(3)
    assert d.phase() is m.Phase.EXITED
    assert d.state.reason == "exited with code 3"


def test_policy_always_restarts_a_clean_exit() -> None:
    d = Driver(spec(policy=RestartPolicy.ALWAYS))
    d.send(m.Start())
    d.crash(0)
    assert d.phase() is m.Phase.RUNNING


def test_stop_signals_the_group_then_escalates_to_sigkill() -> None:
    d = Driver(spec())
    d.send(m.Start())
    actions = d.send(m.Stop())
    assert actions == (m.SignalGroup(101, signal.SIGTERM),)
    assert d.phase() is m.Phase.STOPPING
    d.advance(4.9)
    assert m.next_deadline(d.state) == 5.0
    d.advance(0.2)
    assert d.state.killed and m.next_deadline(d.state) is None
    assert d.actions[-1] == m.SignalGroup(101, signal.SIGKILL)
    d.send(m.Exited(None, signal.SIGKILL, 101))
    assert d.phase() is m.Phase.STOPPED
    assert d.state.pid is None


def test_stop_during_backoff_cancels_the_restart() -> None:
    d = Driver(spec())
    d.send(m.Start())
    d.crash()
    d.now += 0.1
    d.crash()
    assert d.phase() is m.Phase.BACKOFF
    d.send(m.Stop())
    assert d.phase() is m.Phase.STOPPED
    assert m.next_deadline(d.state) is None


def test_stop_while_starting_stops_once_spawned() -> None:
    s = spec()
    started = m.step(s, m.ComponentState(), m.Start(), 0.0)
    assert started.actions == (m.Spawn(),)
    after_stop = m.step(s, started.state, m.Stop(), 0.0)
    spawned = m.step(s, after_stop.state, m.Spawned(7), 0.0)
    assert spawned.state.phase is m.Phase.STOPPING
    assert spawned.actions == (m.SignalGroup(7, signal.SIGTERM),)


def test_exit_of_an_old_pid_is_ignored() -> None:
    d = Driver(spec())
    d.send(m.Start())
    d.send(m.Exited(1, None, 99))
    assert d.phase() is m.Phase.RUNNING
    assert d.state.pid == 101


def test_spawn_failure_backs_off_and_gives_up() -> None:
    """Three failed spawns within the window: backoff 0.5 s, then 1 s, then FATAL, exactly."""
    d = Driver(spec(give_up_starts=3, initial_delay=0.5))
    d.state = m.step(d.spec, d.state, m.Start(), 0).state
    assert d.phase() is m.Phase.STARTING
    phases, waits = [], []
    for _ in range(3):
        t = m.step(d.spec, d.state, m.SpawnFailed("/x: No such file"), d.now)
        d.state = t.state
        phases.append(d.phase())
        if d.phase() is m.Phase.BACKOFF:
            assert d.state.deadline is not None and t.actions == ()
            waits.append(d.state.deadline - d.now)
            d.now = d.state.deadline
            timer = m.step(d.spec, d.state, m.Timer(), d.now)
            d.state = timer.state
            assert d.phase() is m.Phase.STARTING and timer.actions == (m.Spawn(),)
    assert phases == [m.Phase.BACKOFF, m.Phase.BACKOFF, m.Phase.FATAL]
    assert waits == [0.5, 1.0]
    assert d.state.last_exit == m.ExitInfo(None, None, "/x: No such file")
    assert "crash loop: 3 starts" in d.state.reason
    assert m.next_deadline(d.state) is None  # FATAL waits for an operator, not a timer


def probe_spec() -> ComponentSpec:
    probe = ProbeSpec(ProbeKind.TCP, host="127.0.0.1", port=1, initial_delay=5.0, period=2.0)
    return ComponentSpec(
        name="worker",
        command=("/bin/true",),
        stop_timeout=3.0,
        restart=RestartSpec(initial_delay=0, jitter=0),
        liveness=probe,
    )


def test_probe_waits_initial_delay_then_runs_every_period() -> None:
    d = Driver(probe_spec())
    d.send(m.Start())
    assert m.next_deadline(d.state) == 5.0
    d.advance(5.0)
    assert isinstance(d.actions[-1], m.RunProbe)
    assert m.next_deadline(d.state) is None  # one probe at a time
    d.send(m.ProbeResult(True))
    assert m.next_deadline(d.state) == 7.0


def test_failing_probe_restarts_the_component_after_threshold() -> None:
    d = Driver(probe_spec())
    d.send(m.Start())
    d.advance(5.0)
    for i in range(3):
        d.send(m.ProbeResult(False, "refused"))
        if i < 2:
            assert d.phase() is m.Phase.RUNNING
            d.advance(2.0)
    assert d.phase() is m.Phase.STOPPING
    assert "liveness probe failed 3 times: refused" in d.state.reason
    assert d.actions[-1] == m.SignalGroup(101, signal.SIGTERM)
    d.send(m.Exited(None, signal.SIGTERM, 101))
    assert d.phase() is m.Phase.RUNNING
    assert d.state.pid == 102
    assert d.state.probe_failures == 0


def test_probe_success_resets_the_failure_count() -> None:
    d = Driver(probe_spec())
    d.send(m.Start())
    d.advance(5.0)
    d.send(m.ProbeResult(False))
    d.advance(2.0)
    d.send(m.ProbeResult(False))
    d.advance(2.0)
    d.send(m.ProbeResult(True))
    assert d.state.probe_failures == 0


def test_decommission_exit_code_holds_instead_of_restarting() -> None:
    s = ComponentSpec(
        name="worker", command=("/bin/true",), decommission_exit_codes=frozenset({75})
    )
    d = Driver(s)
    d.send(m.Start())
    actions = d.crash(75)
    assert m.DecommissionExit(75) in actions
    assert d.phase() is m.Phase.HELD
    assert m.next_deadline(d.state) is None


def test_adopted_process_runs_and_unknown_status_counts_as_failure() -> None:
    s = ComponentSpec(
        name="worker",
        command=("/bin/true",),
        restart=RestartSpec(policy=RestartPolicy.ON_FAILURE, jitter=0),
    )
    d = Driver(s, now=100.0)
    d.send(m.Adopted(55, started_at=40.0))
    assert d.phase() is m.Phase.RUNNING and d.state.pid == 55 and d.state.wanted
    d.send(m.Exited(None, None, 55))
    assert d.phase() is m.Phase.RUNNING
    assert d.state.pid == 101
