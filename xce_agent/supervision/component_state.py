"""What the component machine (machine.py) knows of one component: its phase, its last exit,
and the rest of its state (timers, restarts, probe results). Pure data, like the machine."""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass


class Phase(str, enum.Enum):
    STOPPED = "stopped"  # not running and not wanted
    STARTING = "starting"  # spawn requested, pid not known yet
    RUNNING = "running"
    BACKOFF = "backoff"  # waiting to restart
    STOPPING = "stopping"  # stop signal sent, waiting for the exit
    EXITED = "exited"  # exited and the restart policy says leave it
    FATAL = "fatal"  # crash loop or cannot start: given up until started again
    HELD = "held"  # exited with a "decommissioned" code: the owner decides what next


@dataclass(frozen=True)
class ExitInfo:
    code: int | None
    signal: int | None
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.code != 0

    def describe(self) -> str:
        if self.error:
            return f"failed to start: {self.error}"
        if self.signal is not None:
            try:
                return f"killed by {signal.Signals(self.signal).name}"
            except ValueError:
                return f"killed by signal {self.signal}"
        if self.code is None:
            return "exited (status unknown: adopted process)"
        return f"exited with code {self.code}"


@dataclass(frozen=True)
class ComponentState:
    phase: Phase = Phase.STOPPED
    wanted: bool = False
    pid: int | None = None
    started_at: float | None = None
    deadline: float | None = None  # backoff end, or when to escalate a stop to SIGKILL
    killed: bool = False
    restart_after_stop: bool = False
    rapid_exits: int = 0
    restarts: int = 0
    starts: tuple[float, ...] = ()
    last_exit: ExitInfo | None = None
    probe_next: float | None = None
    probe_running: bool = False
    probe_failures: int = 0
    reason: str = ""
    code: str = ""  # the reason's code (xce_protocol.reasons), "" before anything happened
    deferrals: int = 0  # starts deferred in a row because the record could not be saved
