"""`xce-agent stop`: stop the host's components on purpose, with or without a running agent.

With an agent running, it is asked (SIGUSR2) to stop its components gracefully and exit.
Without one (after `systemctl stop`, which leaves components running by design), the
components recorded in the state are stopped here: their stop signal to the process group,
their stop timeout, then SIGKILL; the state is updated under the agent's lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import time
from dataclasses import replace

from xce_agent.agent import LOCK_FILE
from xce_agent.config import AgentConfig
from xce_agent.state import AgentState, Lifecycle, StateStore
from xce_agent.supervision.process import ProcessIdentity, boot_id, same_process


def _wait_gone(pidfd: int, timeout: float) -> bool:
    ready, _, _ = select.select([pidfd], [], [], max(0.0, timeout))
    return bool(ready)


def stop_host(config: AgentConfig, timeout: float) -> str:
    """What happened, as one line; raises TimeoutError when the agent did not stop in time."""
    store = StateStore(config.state_directory)
    state = store.read_only()
    if state is None:
        return "nothing to stop: the agent has not run here"
    agent = state.agent
    if agent is not None and same_process(agent.pid, agent.create_time):
        return _ask_agent(agent.pid, timeout)
    return _stop_leftovers(config, store, state)


def _ask_agent(pid: int, timeout: float) -> str:
    pidfd = os.pidfd_open(pid)
    try:
        os.kill(pid, signal.SIGUSR2)
        if not _wait_gone(pidfd, timeout):
            raise TimeoutError(f"the agent (pid {pid}) did not stop within {timeout:g}s")
    finally:
        os.close(pidfd)
    return "components stopped, agent exited"


def _stop_leftovers(config: AgentConfig, store: StateStore, state: AgentState) -> str:
    lock = os.open(config.state_directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        raise TimeoutError("an agent holds the state directory but is not recorded") from None
    try:
        specs = {c.name: c for c in config.components}
        stopped = []
        for record in state.components:
            identity = ProcessIdentity.from_json(record.identity) if record.identity else None
            if identity is None or identity.boot_id != boot_id():
                continue
            if not same_process(identity.pid, identity.create_time):
                continue
            spec = specs.get(record.name)
            _stop_group(
                identity.pid,
                spec.stop_signal if spec else signal.SIGTERM,
                spec.stop_timeout if spec else 10.0,
            )
            stopped.append(record.name)
        comps = tuple(
            replace(c, phase="stopped", pid=None, identity=None, since=time.time())
            if c.name in stopped
            else c
            for c in state.components
        )
        store.save(
            replace(state, components=comps, lifecycle=Lifecycle.STOPPED, updated_at=time.time())
        )
    finally:
        os.close(lock)
    if not stopped:
        return "nothing to stop: no agent and no recorded component is running"
    return f"no agent was running; stopped {', '.join(stopped)}"


def _stop_group(pid: int, signum: int, timeout: float) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)
        if not _wait_gone(pidfd, timeout):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            _wait_gone(pidfd, 5.0)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # strays of the group
    finally:
        os.close(pidfd)
