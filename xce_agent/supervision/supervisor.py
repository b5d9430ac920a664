"""Drive one state machine per component with real processes, pidfds, probes and timers."""

from __future__ import annotations

import functools
import logging
import os
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from xce_agent.supervision import machine as m
from xce_agent.supervision.probes import run_probe
from xce_agent.supervision.process import (
    Handle,
    OutputPipe,
    ProcessIdentity,
    ProcessRunner,
    SpawnError,
    same_process,
)
from xce_agent.supervision.reactor import Reactor, TimerHandle
from xce_agent.supervision.spec import ComponentSpec, ProbeSpec

log = logging.getLogger(__name__)
output_log = logging.getLogger("xce_agent.component")

ChangeCallback = Callable[[str, m.ComponentState], None]
DecommissionCallback = Callable[[str, int], None]


def _ignore_change(name: str, state: m.ComponentState) -> None:
    return None


def _ignore_decommission(name: str, code: int) -> None:
    return None


class Supervisor:
    """Owns the components' processes; all methods run on the reactor's thread.

    The owner sees a narrow API: start or stop a component or a role, read a component's
    state, adopt or retire a process a previous agent left. The runner, the states and the
    process handles stay private, so only the machine's transitions change them.
    """

    def __init__(
        self,
        specs: Iterable[ComponentSpec],
        reactor: Reactor,
        runner: ProcessRunner | None = None,
        output_dir: Path | None = None,
        on_change: ChangeCallback = _ignore_change,
        on_decommission_exit: DecommissionCallback = _ignore_decommission,
        rand: Callable[[], float] = random.random,
        probe: Callable[[ProbeSpec], tuple[bool, str]] = run_probe,
    ) -> None:
        self.specs = {spec.name: spec for spec in specs}
        self.reactor = reactor
        self._runner = runner or ProcessRunner()
        self._states = {name: m.ComponentState() for name in self.specs}
        self._handles: dict[str, Handle] = {}
        self.on_change = on_change
        self.on_decommission_exit = on_decommission_exit
        self._rand = rand
        self._probe = probe
        self._timers: dict[str, TimerHandle] = {}
        self._queue: deque[tuple[str, m.Event]] = deque()
        self._draining = False
        self.outputs: dict[str, OutputPipe] = {}
        if output_dir is not None:
            output_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            for name in self.specs:
                pipe = OutputPipe(output_dir / f"{name}.out")
                self.outputs[name] = pipe
                reactor.add_reader(pipe.fd, functools.partial(self._read_output, name))

    # --- commands ---------------------------------------------------------------------
    def start(self, name: str, reason: str = "requested") -> None:
        self.post(name, m.Start(reason))

    def start_all(self, reason: str = "agent started") -> None:
        for name in self.specs:
            if self._states[name].phase is not m.Phase.RUNNING:
                self.start(name, reason)

    def stop(self, name: str, reason: str = "requested") -> None:
        self.post(name, m.Stop(reason))

    def stop_all(self, reason: str = "requested") -> None:
        for name in self.specs:
            self.stop(name, reason)

    def role(self, role: str) -> list[str]:
        return [name for name, spec in self.specs.items() if spec.role == role]

    def start_role(self, role: str, reason: str) -> None:
        for name in self.role(role):
            self.start(name, reason)

    def stop_role(self, role: str, reason: str) -> None:
        for name in self.role(role):
            self.stop(name, reason)

    def set_role_env(self, role: str, env: Mapping[str, str], fds: tuple[int, ...] = ()) -> None:
        """Variables (and inherited descriptors) for the next starts of the role's components."""
        for name in self.role(role):
            self._runner.set_extra_env(name, env, fds)

    def state(self, name: str) -> m.ComponentState:
        return self._states[name]

    def role_down(self, role: str) -> bool:
        """No component of the role runs, starts or stops."""
        busy = (m.Phase.RUNNING, m.Phase.STARTING, m.Phase.STOPPING)
        names = self.role(role)
        return all(self._states[n].phase not in busy and n not in self._handles for n in names)

    def watched(self, name: str) -> bool:
        return name in self._handles

    def adopt_marked(self, name: str) -> bool:
        """Adopt a process this owner started for `name` but did not record (found by markers)."""
        marked = self._runner.find_marked(self.specs[name])
        if marked is not None and self.adopt(name, marked):
            log.warning("%s: adopted unrecorded process %d by its markers", name, marked.pid)
            return True
        return False

    def retire(self, name: str, identity: ProcessIdentity) -> None:
        """A component no longer configured but still running from before: SIGTERM its group."""
        if same_process(identity.pid, identity.create_time):
            log.warning("%s: no longer configured; sending SIGTERM to its group", name)
            self._runner.signal_group(identity.pid, signal.SIGTERM)

    def adopt(self, name: str, recorded: ProcessIdentity) -> bool:
        """Watch a process a previous agent started, if it is still that process."""
        spec = self.specs[name]
        handle = self._runner.adopt(recorded, spec)
        if handle is None:
            return False
        now = self.reactor.clock.monotonic()

        age = max(0.0, time.time() - recorded.create_time)
        self._watch(name, handle)
        self.post(name, m.Adopted(handle.pid, now - age))
        log.info("%s: adopted running process %d", name, handle.pid)
        return True

    def identities(self) -> dict[str, ProcessIdentity]:
        return {name: handle.identity for name, handle in self._handles.items()}

    def idle(self) -> bool:
        """No process is running and none is being started or stopped."""
        busy = (m.Phase.RUNNING, m.Phase.STARTING, m.Phase.STOPPING)
        return not self._handles and all(s.phase not in busy for s in self._states.values())

    def close(self) -> None:
        """Let go of everything without touching the processes (agent restart)."""
        for timer in self._timers.values():
            timer.cancel()
        for name in list(self._handles):
            handle = self._handles.pop(name)
            self.reactor.remove_reader(handle.pidfd)

            os.close(handle.pidfd)
        for name, pipe in self.outputs.items():
            self._read_output(name)
            self.reactor.remove_reader(pipe.fd)
            pipe.close()

    # --- event processing -------------------------------------------------------------
    def post(self, name: str, event: m.Event) -> None:
        self._queue.append((name, event))
        if self._draining:
            return
        self._draining = True
        try:
            while self._queue:
                self._apply(*self._queue.popleft())
        finally:
            self._draining = False

    def _apply(self, name: str, event: m.Event) -> None:
        spec = self.specs[name]
        before = self._states[name]
        now = self.reactor.clock.monotonic()
        transition = m.step(spec, before, event, now, self._rand())
        self._states[name] = transition.state
        self._schedule(name, transition.state)
        for action in transition.actions:
            self._perform(name, action)
        after = self._states[name]
        if (before.phase, before.pid, before.restarts) != (after.phase, after.pid, after.restarts):
            self._log_change(name, before, after)
            self.on_change(name, after)

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
            self._runner.signal_group(action.pid, action.signal)
        elif isinstance(action, m.RunProbe):
            self._run_probe(name)
        else:
            self.on_decommission_exit(name, action.code)

    def _spawn(self, name: str) -> None:
        spec = self.specs[name]
        try:
            handle = self._runner.spawn(spec, self.outputs.get(name))
        except SpawnError as exc:
            log.error("%s: cannot start: %s", name, exc)
            self._queue.append((name, m.SpawnFailed(str(exc))))
            return
        self._watch(name, handle)
        self._queue.append((name, m.Spawned(handle.pid)))

    def _watch(self, name: str, handle: Handle) -> None:
        self._handles[name] = handle
        self.reactor.add_reader(handle.pidfd, lambda: self._on_exit(name, handle))

    def _on_exit(self, name: str, handle: Handle) -> None:
        self.reactor.remove_reader(handle.pidfd)
        code, signum = self._runner.reap(handle)
        if self._handles.get(name) is handle:
            del self._handles[name]
        if name in self.outputs:
            self._read_output(name)
        self.post(name, m.Exited(code, signum, handle.pid))

    def _run_probe(self, name: str) -> None:
        probe = self.specs[name].liveness
        if probe is None:
            return

        def work() -> None:
            ok, detail = self._probe(probe)
            self.reactor.call_soon_threadsafe(lambda: self.post(name, m.ProbeResult(ok, detail)))

        threading.Thread(target=work, name=f"probe-{name}", daemon=True).start()

    def _read_output(self, name: str) -> None:
        for line in self.outputs[name].read_lines():
            output_log.info("%s: %s", name, line)

    def _log_change(self, name: str, before: m.ComponentState, after: m.ComponentState) -> None:
        detail = after.reason or (after.last_exit.describe() if after.last_exit else "")
        pid = f" pid {after.pid}" if after.pid else ""
        suffix = f" ({detail})" if detail else ""
        log.info("%s: %s -> %s%s%s", name, before.phase.value, after.phase.value, pid, suffix)
