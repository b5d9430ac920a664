"""`xce-agent stop`: stop the host's components on purpose, with or without a running agent.

With an agent running, it is asked (over the control socket; SIGUSR2, which does not drain,
when no socket answers) to stop its components gracefully and exit, a joined one after a
planned stop's drain (its bound is added to the wait); then the state and the processes are
checked, and what the agent left (it may have been killed mid-stop) is stopped here. Without
one (after `systemctl stop`, which leaves components running by design), a joined host's
controller is told first (stop_notice.py), then the components recorded in the state are
stopped here: their stop signal to the process group, their stop
timeout, then SIGKILL (the whole cgroup when they run in one); the state is updated while
holding the state directory. The answer says what happened; a failure is an error, never
"stopped".
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from dataclasses import replace
from pathlib import Path

from xce_agent.config.agent import AgentConfig
from xce_agent.core import planned_stop
from xce_agent.errors import StopTimedOut
from xce_agent.operator.control import SOCKET_NAME, request
from xce_agent.operator.stop_notice import tell_controller
from xce_agent.state import AgentState, ComponentRecord, Lifecycle, StateStore
from xce_agent.supervision import scopes
from xce_agent.supervision.cgroups import CgroupTree, cgroup2_mount
from xce_agent.supervision.escapes import kill_marked
from xce_agent.supervision.identity import ProcessIdentity, mismatch
from xce_agent.supervision.machine import Phase
from xce_agent.supervision.process import carries_marks
from xce_agent.system import single_agent
from xce_protocol.errors import XceError


class StopFailed(XceError):
    """Something still runs after `xce-agent stop`; the message says what."""


def _wait_gone(pidfd: int, timeout: float) -> bool:
    ready, _, _ = select.select([pidfd], [], [], max(0.0, timeout))
    return bool(ready)


def stop_host(config: AgentConfig, timeout: float, drain: float | None = None) -> str:
    """What happened, as one line; StopTimedOut or StopFailed when not everything stopped.
    `drain`: the planned stop's bound (None: controller.drain_on_stop; 0: no drain)."""
    store = StateStore(config.state_directory)
    state = store.read_only()
    if state is None:
        return "nothing to stop: the agent has not run here"
    agent = state.agent
    if agent is not None and single_agent.live_agent(agent):
        configured = config.controller.drain_on_stop if config.controller else 0.0
        _ask_agent(config, agent.pid, timeout + planned_stop.bound(drain, configured), drain)
        after = store.read_only() or state
        tree = _tree(after, config.state_directory)
        if after.lifecycle is Lifecycle.STOPPED and not _still_running(after, tree):
            return "components stopped, agent exited"
        left = _stop_leftovers(config, store, after)
        return f"the agent exited before stopping everything; {left}"
    # No agent to speak for the host: told here, before its worker stops (stop_notice.py).
    told = tell_controller(config, state, drain)
    try:
        done = _stop_leftovers(config, store, state)
    except StopFailed as exc:
        raise StopFailed(f"{exc}; {told}" if told else str(exc)) from None
    return f"{done}; {told}" if told else done


def _ask_agent(config: AgentConfig, pid: int, timeout: float, drain: float | None) -> None:
    pidfd = os.pidfd_open(pid)
    try:
        try:
            answer = request(
                config.state_directory / SOCKET_NAME,
                "stop-all",
                planned_stop.request_text(drain),
                5.0,
            )
        except OSError:  # no control socket: the signal, which stops without a drain
            os.kill(pid, signal.SIGUSR2)
        else:
            if not answer.ok:
                raise StopFailed(f"the agent refused: {answer.message}")
        if not _wait_gone(pidfd, timeout):
            raise StopTimedOut(f"the agent (pid {pid}) did not stop within {timeout:g}s")
    finally:
        os.close(pidfd)


def _identity(record: ComponentRecord) -> ProcessIdentity | None:
    identity = ProcessIdentity.from_json(record.identity) if record.identity else None
    return identity if identity is not None and not mismatch(identity) else None


def _tree(state: AgentState, state_directory: Path) -> CgroupTree | None:
    """The agent's cgroup (one of the cgroup2 hierarchy: the record names it, and a path
    outside the hierarchy is ignored) with the scopes derived from the state directory."""
    mount = cgroup2_mount()
    if mount is None:
        return None
    root = Path(os.path.normpath(state.cgroup_root)) if state.cgroup_root else None
    if root is None or mount not in root.parents or not root.is_dir():
        root = mount / scopes.SLICE / "-"  # no delegated cgroup: its leaves never exist
    found = scopes.for_cleanup(mount, state_directory.resolve())
    if found is None and not root.is_dir():
        return None
    return CgroupTree(root, scopes=found, mount=mount)


def _still_running(state: AgentState, tree: CgroupTree | None) -> list[str]:
    names = [c.name for c in state.components if _identity(c) is not None]
    names += [n for n in (tree.names() if tree else ()) if tree and tree.populated(n)]
    return sorted(set(names))


def _stop_leftovers(config: AgentConfig, store: StateStore, state: AgentState) -> str:
    try:
        held = single_agent.acquire(config.state_directory)
    except single_agent.AlreadyRunning:
        raise StopFailed("an agent holds the state directory but is not recorded") from None
    try:
        specs = {c.name: c for c in config.components}
        tree = _tree(state, config.state_directory)
        stopped = []
        for record in state.components:
            identity = _identity(record)
            spec = specs.get(record.name)
            if identity is not None and tree is not None and tree.root.is_dir():
                # With cgroups a recorded process is signalled only in its component's cgroup.
                identity = identity if tree.contains(record.name, identity.pid) else None
            if identity is not None:
                signum = spec.stop_signal if spec else identity.stop_signal
                wait = spec.stop_timeout if spec else identity.stop_timeout
                _stop_group(identity.pid, signum, wait)
                stopped.append(record.name)
            if tree is not None and tree.populated(record.name):
                tree.kill(record.name)
                stopped.append(record.name)
        for name in tree.names() if tree else ():
            if tree is not None and tree.populated(name):
                tree.kill(name)  # a component no record names: nothing of it may stay
                stopped.append(name)
        owner = str(config.state_directory.resolve())
        for name in sorted({c.name for c in state.components}) if tree is not None else ():
            if _kill_escaped(name, owner):
                stopped.append(name)
        left = _wait_all_gone(state, tree, 5.0)
        comps = tuple(
            replace(c, phase=Phase.STOPPED.value, pid=None, identity=None, since=time.time())
            if c.name in stopped and c.name not in left
            else c
            for c in state.components
        )
        lifecycle = Lifecycle.STOPPED if not left else state.lifecycle
        store.save(replace(state, components=comps, lifecycle=lifecycle, updated_at=time.time()))
    finally:
        held.release()
    if left:
        raise StopFailed(f"still running after the stop: {', '.join(left)}")
    if not stopped:
        return "nothing to stop: no agent and no recorded component is running"
    return f"no agent was running; stopped {', '.join(sorted(set(stopped)))}"


def _kill_escaped(name: str, owner: str) -> int:
    """What moved itself out of the component's cgroup goes with it (escapes.py)."""
    return kill_marked(lambda pid: carries_marks(pid, name, owner))


def _wait_all_gone(state: AgentState, tree: CgroupTree | None, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = _still_running(state, tree)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


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
