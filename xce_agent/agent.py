"""The node agent's wiring: config in, components supervised, state saved, systemd told.

Restart versus stop: SIGTERM (what `systemctl stop|restart` and package upgrades send with
`KillMode=process`) makes the agent exit and leave its components running, to be adopted by
the next agent; only when the whole system is shutting down does SIGTERM stop them too.
`xce-agent stop` (SIGUSR2 to the running agent) stops every component gracefully and then
the agent. See docs/operations.md.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace

from xce_agent.config import AgentConfig
from xce_agent.errors import StateError
from xce_agent.membership import Membership
from xce_agent.notify import Notifier, watchdog_interval
from xce_agent.state import (
    AgentRecord,
    AgentState,
    ComponentRecord,
    ControllerContact,
    StateStore,
    StateWriter,
)
from xce_agent.status_line import status_line
from xce_agent.supervision import machine as m
from xce_agent.supervision.process import (
    ProcessIdentity,
    ProcessRunner,
    boot_id,
    identify,
    same_process,
)
from xce_agent.supervision.reactor import Reactor
from xce_agent.supervision.supervisor import Supervisor

log = logging.getLogger(__name__)

LOCK_FILE = "agent.lock"


def system_shutting_down() -> bool:
    """True while systemd is taking the machine down (then SIGTERM stops the components)."""
    try:
        result = subprocess.run(
            ["systemctl", "is-system-running"],
            check=False,
            capture_output=True,
            text=True,
            timeout=2,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.stdout.strip() == "stopping"


class AlreadyRunning(StateError):
    """Another agent holds the state directory: two would start components twice."""


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        notifier: Notifier,
        reactor: Reactor | None = None,
        runner: ProcessRunner | None = None,
        shutting_down: Callable[[], bool] = system_shutting_down,
    ) -> None:
        self.config = config
        self.notifier = notifier
        self.reactor = reactor or Reactor()
        self.store = StateStore(config.state_directory)
        self.writer: StateWriter | None = None
        self._shutting_down = shutting_down
        self.supervisor = Supervisor(
            config.components,
            self.reactor,
            runner or ProcessRunner(owner=str(config.state_directory.resolve())),
            output_dir=config.state_directory / "output",
            on_change=self._component_changed,
            on_decommission_exit=self._decommission_exit,
        )
        self.state = AgentState(instance_id=config.instance.id, roles=config.roles)
        self.membership = Membership(
            config,
            self.supervisor,
            lambda: self.state,
            self._replace_state,
            self.reactor.call_soon_threadsafe,
        )
        self._since: dict[str, float] = {}
        self._lock_fd: int | None = None
        self._leaving: str | None = None  # "detach" or "stop" once the agent is on its way out
        self._last_status = ""

    # --- lifecycle --------------------------------------------------------------------
    def run(self) -> int:
        self.store.ensure_directory()
        self._lock()
        self.writer = StateWriter(self.store)
        try:
            previous = self.store.load()
            self._record_self(previous)
            self._install_signals()
            self._resume(previous)
            if self.state.lifecycle != "decommissioned":
                self._set_lifecycle("running")
            self.notifier.notify("READY=1")
            self._start_watchdog()
            self.reactor.run(until=self._done)
            return 0
        finally:
            self._finish()

    def _lock(self) -> None:
        path = self.config.state_directory / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(
                f"{self.config.state_directory}: another xce-agent is running with this "
                "state directory"
            ) from None
        self._lock_fd = fd

    def _record_self(self, previous: AgentState | None) -> None:
        me = identify(os.getpid())
        record = AgentRecord(
            pid=os.getpid(),
            create_time=me.create_time if me else 0.0,
            boot_id=boot_id(),
            started_at=time.time(),
            config=str(self.config.path),
        )
        base = previous or self.state
        self.state = replace(
            base,
            agent=record,
            lifecycle="starting",
            instance_id=self.config.instance.id,
            roles=self.config.roles,
            controller=ControllerContact(
                "not configured" if self.config.controller is None else "waiting",
                time.time(),
            ),
        )
        self._save()

    def _resume(self, previous: AgentState | None) -> None:
        """Adopt live components a previous agent left, start the rest."""
        recorded = {c.name: c for c in (previous.components if previous else ())}
        for name, record in recorded.items():
            identity = ProcessIdentity.from_json(record.identity) if record.identity else None
            if identity is None:
                continue
            if name not in self.supervisor.specs:
                self._retire_unknown(name, identity)
            elif not self.supervisor.adopt(name, identity):
                log.info("%s: recorded process %d is gone", name, identity.pid)
        for name, spec in self.supervisor.specs.items():
            if name in self.supervisor.handles:
                continue
            marked = self.supervisor.runner.find_marked(spec)
            if marked is not None and self.supervisor.adopt(name, marked):
                log.warning("%s: adopted unrecorded process %d by its markers", name, marked.pid)
        self.membership.start()

    def _retire_unknown(self, name: str, identity: ProcessIdentity) -> None:
        """A component removed from the config but still running from before: stop it."""
        if same_process(identity.pid, identity.create_time):
            log.warning("%s: no longer configured; sending SIGTERM to its group", name)
            self.supervisor.runner.signal_group(identity.pid, signal.SIGTERM)

    def _install_signals(self) -> None:
        self.reactor.add_signal_handler(signal.SIGTERM, self._on_term)
        self.reactor.add_signal_handler(signal.SIGINT, self._on_term)
        self.reactor.add_signal_handler(signal.SIGUSR2, self._on_stop_request)
        self.reactor.add_signal_handler(signal.SIGHUP, self._on_hup)

    def _on_term(self, signum: int) -> None:
        if self._shutting_down():
            log.info("system is shutting down: stopping components")
            self.request_stop("system shutdown")
        else:
            log.info("%s: exiting; components keep running", signal.Signals(signum).name)
            self._leaving = "detach"
            self.reactor.stop()

    def _on_stop_request(self, signum: int) -> None:
        self.request_stop("xce-agent stop")

    def _on_hup(self, signum: int) -> None:
        log.info("SIGHUP ignored: restart the agent to apply a changed config")

    def request_stop(self, reason: str) -> None:
        self._leaving = "stop"
        self.notifier.notify("STOPPING=1")
        self._set_lifecycle("stopping")
        self.supervisor.stop_all(reason)

    def _done(self) -> bool:
        return self._leaving == "stop" and self.supervisor.idle()

    def _finish(self) -> None:
        self.membership.stop()
        self.notifier.notify("STOPPING=1")
        lifecycle = "stopped" if self._leaving == "stop" else "detached"
        if self.state.tombstone is not None:
            lifecycle = "decommissioned"
        # Save while the handles are still known: the next agent adopts from this record.
        self._set_lifecycle(lifecycle)
        self.supervisor.close()
        if self.writer is not None:
            self.writer.close()
        self.reactor.restore_signals()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- watchdog ---------------------------------------------------------------------
    def _start_watchdog(self) -> None:
        interval = watchdog_interval()
        if interval is None:
            return

        def ping() -> None:
            self.notifier.notify("WATCHDOG=1")
            self.reactor.call_later(interval, ping)

        ping()

    # --- state ------------------------------------------------------------------------
    def _component_changed(self, name: str, cstate: m.ComponentState) -> None:
        self._since[name] = time.time()
        self._refresh_components()
        self.membership.components_changed()

    def _decommission_exit(self, name: str, code: int) -> None:
        self.membership.worker_says_decommissioned(name, code)

    def _replace_state(self, state: AgentState) -> None:
        tombstone_changed = state.tombstone != self.state.tombstone
        self.state = state
        self._save()
        if tombstone_changed and self.writer is not None:
            self.writer.flush()  # the tombstone is on disk before the worker is stopped

    def _refresh_components(self) -> None:
        identities = self.supervisor.identities()
        records = []
        for spec in self.config.components:
            cstate = self.supervisor.states[spec.name]
            identity = identities.get(spec.name)
            records.append(
                ComponentRecord(
                    name=spec.name,
                    role=spec.role,
                    phase=cstate.phase.value,
                    pid=cstate.pid,
                    identity=identity.to_json() if identity else None,
                    restarts=cstate.restarts,
                    last_exit=cstate.last_exit.describe() if cstate.last_exit else None,
                    reason=cstate.reason,
                    since=self._since.get(spec.name, time.time()),
                )
            )
        self.state = replace(self.state, components=tuple(records))
        self._save()

    def _set_lifecycle(self, lifecycle: str) -> None:
        self.state = replace(self.state, lifecycle=lifecycle)
        self._refresh_components()

    def _save(self) -> None:
        self.state = replace(self.state, updated_at=time.time())
        if self.writer is not None:
            self.writer.submit(self.state)
        line = status_line(self.state)
        if line != self._last_status:
            self._last_status = line
            self.notifier.notify(f"STATUS={line}")
