"""What the component machine (machine.py) hears and what it asks of the supervisor.

Events: commands (start, stop), a spawn's outcome, an adoption, an exit, a timer, a probe's
result. Actions: spawn, signal the process group, run the liveness probe, report a
decommission exit code. Pure data, like the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from xce_protocol.reasons import Reason

# --- events -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    reason: str = "requested"
    code: Reason = Reason.COMPONENT_STARTED


@dataclass(frozen=True)
class Stop:
    reason: str = "requested"
    code: Reason = Reason.COMPONENT_STOPPED


@dataclass(frozen=True)
class Spawned:
    pid: int


@dataclass(frozen=True)
class SpawnFailed:
    error: str


@dataclass(frozen=True)
class Deferred:
    """The start was not made: its record could not be saved first (prestart.py). Not a
    start and not a crash: retried after a backoff that grows with each deferral."""

    error: str
    code: Reason = Reason.STATE_UNWRITABLE


@dataclass(frozen=True)
class Adopted:
    pid: int
    started_at: float  # monotonic time the process started, as far as it can be known


@dataclass(frozen=True)
class Exited:
    code: int | None  # None when killed by a signal or when the status is unknown
    signal: int | None = None
    pid: int | None = None  # which process; an exit of a process no longer tracked is ignored


@dataclass(frozen=True)
class Timer:
    """Time passed; sent when `next_deadline` is reached."""


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    detail: str = ""


Event = Union[Start, Stop, Spawned, SpawnFailed, Deferred, Adopted, Exited, Timer, ProbeResult]

# --- actions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spawn:
    pass


@dataclass(frozen=True)
class SignalGroup:
    pid: int
    signal: int


@dataclass(frozen=True)
class RunProbe:
    pass


@dataclass(frozen=True)
class DecommissionExit:
    code: int


Action = Union[Spawn, SignalGroup, RunProbe, DecommissionExit]
