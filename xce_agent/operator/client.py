"""The CLI side of operator control: send one command, then wait until it took effect.

The agent answers at once; `start`, `stop`, `restart` and `reset` then watch the state file
until the component got where it was sent (or say where it is when the time is up), so the
command's exit status tells the truth.
"""

from __future__ import annotations

import time

from xce_agent.config.agent import AgentConfig
from xce_agent.errors import StateError
from xce_agent.operator.control import SOCKET_NAME, request
from xce_agent.state import ComponentRecord, StateStore
from xce_protocol.errors import XceError

_DOWN = ("stopped", "exited", "fatal", "held")


class OperatorError(XceError):
    """The command failed or did not take effect; the message says why, in one line."""


def run_command(config: AgentConfig, command: str, name: str, timeout: float) -> str:
    store = StateStore(config.state_directory)
    before = _component(store, name)
    try:
        answer = request(config.state_directory / SOCKET_NAME, command, name, timeout)
    except OSError as exc:
        raise OperatorError(f"no running agent answers ({exc.strerror or exc})") from None
    if not answer.ok:
        raise OperatorError(answer.message)
    if answer.pending:
        return answer.message
    if command in ("start", "restart", "reset"):
        old = before.pid if before and command == "restart" else None
        record = _wait(
            store, name, timeout, lambda c: c.phase == "running" and c.pid != old, before
        )
        return f"{name} running, pid {record.pid}"
    if command == "stop":
        record = _wait(store, name, timeout, lambda c: c.phase in _DOWN, before)
        return f"{name} {record.phase}"
    return answer.message


def _component(store: StateStore, name: str) -> ComponentRecord | None:
    try:
        state = store.read_only()
    except StateError:
        return None
    return state.component(name) if state else None


def _moved(record: ComponentRecord, before: ComponentRecord | None) -> bool:
    """The saved record is newer than the one read before the command (the file lags)."""
    if before is None:
        return True
    return (record.since, record.restarts, record.pid) != (
        before.since,
        before.restarts,
        before.pid,
    )


def _wait(
    store: StateStore,
    name: str,
    timeout: float,
    done: object,
    before: ComponentRecord | None,
) -> ComponentRecord:
    assert callable(done)
    deadline = time.monotonic() + timeout
    record = None
    while time.monotonic() < deadline:
        record = _component(store, name)
        if record is not None and done(record):
            return record
        if record is not None and record.phase == "fatal" and _moved(record, before):
            raise OperatorError(f"{name} is fatal: {record.reason or record.last_exit}")
        time.sleep(0.05)
    where = f"{record.phase} ({record.reason})" if record else "unknown"
    raise OperatorError(f"{name} did not get there within {timeout:g}s: it is {where}")
