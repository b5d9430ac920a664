"""The records the state file holds: each component's, the agent's own, the start intents
written ahead of a start, the decommission tombstone, and where the agent process is."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ComponentRecord:
    name: str
    role: str
    phase: str
    pid: int | None = None
    identity: dict[str, Any] | None = None  # ProcessIdentity.to_json()
    restarts: int = 0
    last_exit: str | None = None
    reason: str = ""
    since: float = 0.0  # wall-clock time of the last phase change
    started: float = 0.0  # wall-clock start of the running process (uptime)
    next_retry: float | None = None  # wall-clock time of the next restart while in backoff
    tail: tuple[str, ...] = ()  # the last lines of its output
    note: str = ""  # e.g. "restarting: its configured command changed"
    code: str = ""  # the reason's code (xce_protocol.reasons)
    limits: str = ""  # how its limits are enforced (or that they are not)


class Lifecycle(str, enum.Enum):
    """Where the agent process is (where the host stands is `MembershipState.standing`)."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"  # stopping every component, then the agent (xce-agent stop)
    STOPPED = "stopped"  # the agent exited after stopping its components
    DETACHED = "detached"  # the agent exited and left its components to the next agent


@dataclass(frozen=True)
class Tombstone:
    """The on-disk view of a DECOMMISSIONED standing: this instance's worker never runs again.

    Written into state.json beside the standing so that any agent version reading the file
    (an older one after a downgrade, too) honours it.
    """

    instance_id: str
    reason: str
    at: float


@dataclass(frozen=True)
class AgentRecord:
    pid: int
    create_time: float
    boot_id: str
    started_at: float
    config: str
    start_ticks: int = 0  # exact start time in clock ticks: the live agent is this process


@dataclass(frozen=True)
class StartIntent:
    """Written (and fsync'ed) before a component's start, replaced by its identity after:
    a process started under it whose identity never reached the disk (the agent killed in
    between) is still known to the next agent (components/prestart.py)."""

    name: str
    boot_id: str
    after_ticks: int  # clock ticks since boot before the start: the process started later
    owner: str  # the agent's state directory, as the component's environment carries it
    boot_time: float = 0.0  # btime seen with boot_id (supervision.boot.same_boot)
