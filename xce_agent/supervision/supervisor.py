"""Drive one state machine per component with real processes, pidfds, probes and timers.

The set of components can change while running (`add`, `replace`, `remove`: a reloaded
config); a removed component is stopped to the end and leaves the state only once nothing
of it runs. Output is read in bounded bites (output.py), so a flooding component never
delays another one's exit handling.

The processes are watched through their pidfds in pidfds.py; what the owner plugs in (the
singleton gate, the start guard, the callbacks) is in seams.py; the log line of each change
in change_log.py.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from xce_agent.errors import UnexpectedEvent
from xce_agent.supervision import machine as m
from xce_agent.supervision.cgroups import CgroupTree
from xce_agent.supervision.change_log import log_change
from xce_agent.supervision.event_queue import EventQueue
from xce_agent.supervision.identity import ProcessIdentity
from xce_agent.supervision.output_reader import OutputReaders
from xce_agent.supervision.pidfds import Pidfds
from xce_agent.supervision.probes import run_probe
from xce_agent.supervision.process import ProcessRunner, SpawnError
from xce_agent.supervision.reactor import Reactor, TimerHandle
from xce_agent.supervision.seams import (
    ChangeCallback,
    DecommissionCallback,
    Gate,
    StartGuard,
    ignore_change,
    ignore_decommission,
)
from xce_agent.supervision.spec import (
    STOP_SIGNAL,
    STOP_TIMEOUT,
    ComponentSpec,
    ProbeSpec,
    RestartPolicy,
    RestartSpec,
)
from xce_protocol.reasons import Reason

log = logging.getLogger(__name__)

_BUSY = (m.Phase.RUNNING, m.Phase.STARTING, m.Phase.STOPPING)
_UNWRITABLE = {"reason_code": Reason.STATE_UNWRITABLE.value}


class Supervisor:
    """Owns the components' processes; all methods run on the reactor's thread.

    The owner sees a narrow API: start, stop or restart a component or a role, read a
    component's state, adopt or retire a process a previous agent left, change the set of
    components. The runner, the states and the process handles stay private, so only the
    machine's transitions change them.
    """

    def __init__(
        self,
        specs: Iterable[ComponentSpec],
        reactor: Reactor,
        runner: ProcessRunner | None = None,
        output_dir: Path | None = None,
        on_change: ChangeCallback = ignore_change,
        on_decommission_exit: DecommissionCallback = ignore_decommission,
        rand: Callable[[], float] = random.random,
        probe: Callable[[ProbeSpec], tuple[bool, str]] = run_probe,
        on_output: Callable[[str], None] | None = None,
    ) -> None:
        self.specs: dict[str, ComponentSpec] = {}
        self._states: dict[str, m.ComponentState] = {}
        self.reactor = reactor
        self._runner = runner or ProcessRunner()
        self._pidfds = Pidfds(reactor, self._runner, self._exited)
        self.on_change = on_change
        self.on_decommission_exit = on_decommission_exit
        self.retiring: set[str] = set()  # removed from the config, stopping to the end
        self.closing = False  # stop_all: the agent stops every component, then itself
        self.notes: dict[str, str] = {}  # the last thing an operator should know, per component
        self._rand = rand
        self._probe = probe
        self._timers: dict[str, TimerHandle] = {}
        self._drains: dict[str, TimerHandle] = {}
        self._events: EventQueue[m.Event] = EventQueue(self._apply)
        self.gate: Gate | None = None
        self.guard: StartGuard | None = None
        self._outputs = OutputReaders(output_dir, reactor, on_output)
        self._killed: set[str] = set()
        for spec in specs:
            self.add(spec)

    # --- the set of components --------------------------------------------------------
    def add(self, spec: ComponentSpec) -> None:
        self.specs[spec.name] = spec
        self.retiring.discard(spec.name)  # back in the config before its removal finished
        self._states.setdefault(spec.name, m.ComponentState())
        self._outputs.open(spec.name)

    def replace(self, spec: ComponentSpec, reason: str) -> None:
        """A changed config for a known component: applied now, restarting it if it runs, or
        at once if it waits out a backoff (the backoff belonged to the old command)."""
        self.specs[spec.name] = spec
        self._runner.forget_env(spec.name)
        if self._states[spec.name].phase in (*_BUSY, m.Phase.BACKOFF):
            self.restart(spec.name, reason)

    def update(self, spec: ComponentSpec) -> None:
        """A changed config for a known component that changes only how it is supervised
        (restart policy, probes, timeouts): taken as it is, the running process kept."""
        self.specs[spec.name] = spec

    def remove(self, name: str, reason: str) -> None:
        """Stop `name` to the end (SIGKILL after its timeout), then forget it."""
        self.retiring.add(name)
        self.post(name, m.Stop(reason))
        self._maybe_forget(name)

    # --- commands ---------------------------------------------------------------------
    def start(
        self, name: str, reason: str = "requested", code: Reason = Reason.COMPONENT_STARTED
    ) -> None:
        if name in self.retiring:
            return  # removed from the config: it only stops
        if self.closing:
            log.info("%s: not started (%s): the agent is stopping", name, reason)
            return
        if self.gate is not None and name in self.gate and not self.gate.holds(name):
            self.gate.want(name, reason)  # a singleton starts once its lease is held
            return
        self.post(name, m.Start(reason, code))

    def start_all(self, reason: str = "agent started") -> None:
        for name in self.specs:
            if self._states[name].phase is not m.Phase.RUNNING and name not in self.retiring:
                self.start(name, reason)

    def stop(
        self, name: str, reason: str = "requested", code: Reason = Reason.COMPONENT_STOPPED
    ) -> None:
        if self.gate is not None and name in self.gate:
            self.gate.unwant(name, reason)  # and its lease is given back once it is down
        self.post(name, m.Stop(reason, code))

    def stop_all(self, reason: str = "requested") -> None:
        """The agent's last stop: nothing starts again (a reload, `xce-agent restart`, a
        confirmation answered meanwhile would otherwise start a component after its stop)."""
        self.closing = True
        for name in list(self.specs):
            self.stop(name, reason)

    def role(self, role: str) -> list[str]:
        specs = self.specs.items()
        return [name for name, spec in specs if spec.role == role and name not in self.retiring]

    def start_role(self, role: str, reason: str, code: Reason = Reason.COMPONENT_STARTED) -> None:
        for name in self.role(role):
            self.start(name, reason, code)

    def stop_role(self, role: str, reason: str, code: Reason = Reason.COMPONENT_STOPPED) -> None:
        for name in self.role(role):
            self.stop(name, reason, code)

    def set_role_env(self, role: str, env: Mapping[str, str], fds: tuple[int, ...] = ()) -> None:
        """Variables (and inherited descriptors) for the next starts of the role's components."""
        for name in self.role(role):
            self._runner.set_extra_env(name, env, fds)

    def state(self, name: str) -> m.ComponentState:
        return self._states[name]

    def send_signal(self, name: str, signum: int) -> bool:
        """Signal the component's process through its pidfd; False when it has none."""
        return self._pidfds.send_signal(name, signum)

    def role_down(self, role: str) -> bool:
        """No component of the role runs, starts or stops."""
        names = [name for name, spec in self.specs.items() if spec.role == role]
        return all(self._states[n].phase not in _BUSY and n not in self._pidfds for n in names)

    def watched(self, name: str) -> bool:
        return name in self._pidfds

    def watched_pids(self) -> list[int]:
        return self._pidfds.pids()

    def containment(self) -> CgroupTree | None:
        return self._runner.cgroups

    def contained_alive(self, name: str) -> bool:
        return self._runner.contained_alive(name)

    def set_env(self, name: str, env: Mapping[str, str], fds: tuple[int, ...] = ()) -> None:
        """Variables (and inherited descriptors) for the next starts of `name`."""
        self._runner.set_extra_env(name, env, fds)

    def limits_note(self, name: str) -> str:
        return self._runner.limits_note(self.specs[name])

    def restart(self, name: str, reason: str) -> None:
        """Stop gracefully, then start again (or just start when not running)."""
        self.notes[name] = reason
        log.info("%s: restarting (%s)", name, reason)
        self.post(name, m.Stop(reason))
        self.start(name, reason)

    def adopt(self, name: str, recorded: ProcessIdentity, replace_changed: bool = True) -> bool:
        """Watch a process a previous agent started, if it is still that process.

        One that is ours but no longer matches its config (or itself) is restarted.
        """
        spec = self.specs[name]
        adoption = self._runner.adopt(recorded, spec)
        handle = adoption.handle
        if handle is None:
            log.info("%s: recorded process %d is gone (%s)", name, recorded.pid, adoption.gone)
            return False
        now = self.reactor.clock.monotonic()
        started = recorded.started_epoch()
        age = max(0.0, time.time() - started) if started else 0.0
        self._pidfds.watch(name, handle)
        self.post(name, m.Adopted(handle.pid, now - age))
        log.info("%s: adopted running process %d", name, handle.pid)
        if adoption.replace and replace_changed:
            self.restart(name, f"adopted process {handle.pid} replaced: {adoption.replace}")
        return True

    def retire(self, name: str, recorded: ProcessIdentity | None) -> None:
        """A component no longer configured that may still run from before: stop it."""
        command = recorded.command or recorded.cmdline if recorded else ()
        spec = ComponentSpec(
            name=name,
            command=command or ("?",),
            restart=RestartSpec(policy=RestartPolicy.NEVER),
            stop_signal=recorded.stop_signal if recorded else STOP_SIGNAL,
            stop_timeout=recorded.stop_timeout if recorded else STOP_TIMEOUT,
        )
        self.add(spec)
        adopted = recorded is not None and self.adopt(name, recorded, replace_changed=False)
        leftovers = self._runner.kill_leftovers(name) if not adopted else 0
        if adopted or leftovers:
            log.warning("%s: no longer configured; stopping it", name)
        self.remove(name, "no longer configured")

    def identities(self) -> dict[str, ProcessIdentity]:
        """The identities to record, following an exec since the start (see `current`)."""
        return self._pidfds.identities()

    def tail(self, name: str) -> tuple[str, ...]:
        return self._outputs.tail(name)

    def idle(self) -> bool:
        """No process is running and none is being started or stopped."""
        if self._pidfds or any(s.phase in _BUSY for s in self._states.values()):
            return False
        return not any(self._runner.contained_alive(name) for name in self.specs)

    def close(self) -> None:
        """Let go of everything without touching the processes (agent restart)."""
        for timer in [*self._timers.values(), *self._drains.values()]:
            timer.cancel()
        self._pidfds.close()
        self._outputs.close_all()

    # --- event processing -------------------------------------------------------------
    def post(self, name: str, event: m.Event) -> None:
        self._events.post(name, event)

    def _apply(self, name: str, event: m.Event) -> None:
        spec = self.specs.get(name)
        if spec is None:
            return
        before = self._states[name]
        now = self.reactor.clock.monotonic()
        try:
            transition = m.step(spec, before, event, now, self._rand())
        except UnexpectedEvent as exc:
            code = Reason.UNEXPECTED_EVENT.value
            log.error("%s: dropped %s", name, exc, extra={"reason_code": code, "component": name})
            return
        self._states[name] = transition.state
        self._schedule(name, transition.state)
        for action in transition.actions:
            self._perform(name, action)
        after = self._states[name]
        if (before.phase, before.pid, before.restarts) != (after.phase, after.pid, after.restarts):
            log_change(name, self.specs[name].role, before, after)
            if after.phase is m.Phase.RUNNING and before.phase is m.Phase.STARTING:
                self.notes.pop(name, None)
            self.on_change(name, after)
        if after.phase not in _BUSY:
            self._watch_drain(name)

    def _schedule(self, name: str, state: m.ComponentState) -> None:
        old = self._timers.pop(name, None)
        if old is not None:
            old.cancel()
        when = m.next_deadline(state)
        if when is not None:
            self._timers[name] = self.reactor.call_at(when, lambda: self.post(name, m.Timer()))

    def _perform(self, name: str, action: m.Action) -> None:
        if isinstance(action, m.Spawn):
            self._spawn(name)
        elif isinstance(action, m.SignalGroup):
            self._runner.signal_group(action.pid, action.signal, name)
            if action.signal == signal.SIGKILL:
                self._killed.add(name)  # its cgroup was just killed: no stray check needed
        elif isinstance(action, m.RunProbe):
            self._run_probe(name)
        else:
            self.on_decommission_exit(name, action.code)

    def _spawn(self, name: str, waited: float = 0.0) -> None:
        spec = self.specs.get(name)
        if spec is None or self._states[name].phase is not m.Phase.STARTING:
            return  # removed, or stopped, while a deferred start waited
        stray = 0 if name in self._killed else self._runner.kill_leftovers(name)
        self._killed.discard(name)
        if stray:
            log.warning("%s: killed %d leftover processes in its cgroup before start", name, stray)
        if waited < 5.0 and not self._runner.ready(spec):
            # Its previous scope is still known to systemd (for a few ms after it emptied):
            # the same unit name cannot be started again until it is gone.
            self.reactor.call_later(0.01, lambda: self._spawn(name, waited + 0.01))
            return
        why = self.guard.before_start(name) if self.guard is not None else ""
        if why:
            log.error("%s: not started: %s", name, why, extra=_UNWRITABLE)
            self.post(name, m.Deferred(why))
            return
        try:
            handle = self._runner.spawn(spec, self._outputs.pipe(name))
        except SpawnError as exc:
            log.error("%s: cannot start: %s", name, exc)
            self.post(name, m.SpawnFailed(str(exc)))
            return
        self._pidfds.watch(name, handle)
        why = self.guard.started(name, handle.identity) if self.guard is not None else ""
        if why:
            log.error("%s: stopped at once: %s", name, why, extra=_UNWRITABLE)
            self._pidfds.discard(name, handle)
            self.post(name, m.Deferred(why))
            return
        self.post(name, m.Spawned(handle.pid))

    def _exited(self, name: str, code: int | None, signum: int | None, pid: int) -> None:
        self._outputs.read_unless_paused(name)
        self.post(name, m.Exited(code, signum, pid))

    def _watch_drain(self, name: str, interval: float = 0.01) -> None:
        """Once the main process is gone, wake up until its cgroup is empty too."""
        old = self._drains.pop(name, None)
        if old is not None:
            old.cancel()
        if self._runner.contained_alive(name):
            later = min(interval * 2, 0.2)
            self._drains[name] = self.reactor.call_later(
                interval, lambda: self._watch_drain(name, later)
            )
            return
        self._maybe_forget(name)

    def _maybe_forget(self, name: str) -> None:
        if name not in self.retiring or name not in self.specs:
            return
        if self._states[name].phase in _BUSY or self._runner.contained_alive(name):
            return
        self.retiring.discard(name)
        del self.specs[name]
        state = self._states.pop(name)
        self._schedule(name, m.ComponentState())
        self._outputs.close(name)
        if self._runner.cgroups is not None:
            self._runner.cgroups.remove(name)
        log.info("%s: removed", name)
        self.on_change(name, state)

    def _run_probe(self, name: str) -> None:
        spec = self.specs[name]
        if spec.liveness is None:
            return
        probe = dataclasses.replace(spec.liveness, user=spec.user, group=spec.group)

        def work() -> None:
            ok, detail = self._probe(probe)
            self.reactor.call_soon_threadsafe(lambda: self.post(name, m.ProbeResult(ok, detail)))

        threading.Thread(target=work, name=f"probe-{name}", daemon=True).start()
