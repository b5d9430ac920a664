"""What to run and how to keep it running: immutable descriptions built from config."""

from __future__ import annotations

import enum
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field

# How a component is stopped when its config says nothing: the one source of these defaults.
STOP_SIGNAL = int(signal.SIGTERM)
STOP_TIMEOUT = 10.0  # seconds from the stop signal to SIGKILL


class RestartPolicy(enum.Enum):
    ALWAYS = "always"
    ON_FAILURE = "on-failure"
    NEVER = "never"


class ProbeKind(enum.Enum):
    EXEC = "exec"
    TCP = "tcp"
    HTTP = "http"


@dataclass(frozen=True)
class RestartSpec:
    """Restart policy with capped exponential backoff.

    The first restart after a failure waits `initial_delay` (may be 0); the k-th consecutive
    one waits `delay * multiplier**(k-2)`, capped at `max_delay`, each spread by +/- `jitter`.
    The count resets once the process stayed up `reset_after`. `give_up_starts` starts within
    `give_up_window` means a crash loop: the component goes FATAL and is left alone.
    """

    policy: RestartPolicy = RestartPolicy.ALWAYS
    initial_delay: float = 0.0
    delay: float = 1.0
    max_delay: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.1
    reset_after: float = 30.0
    give_up_starts: int = 10
    give_up_window: float = 300.0


@dataclass(frozen=True)
class ProbeSpec:
    """A liveness probe: `failure_threshold` failures in a row restart the component."""

    kind: ProbeKind
    command: tuple[str, ...] = ()
    host: str = ""
    port: int = 0
    url: str = ""
    initial_delay: float = 10.0
    period: float = 10.0
    timeout: float = 2.0
    failure_threshold: int = 3
    # An exec probe runs as its component's user and group (set by the supervisor).
    user: str | None = None
    group: str | None = None


@dataclass(frozen=True)
class ResourceLimits:
    """Per-component cgroup limits (memory.max, cpu.weight, pids.max); None leaves it open."""

    memory_max: int | None = None
    cpu_weight: int | None = None
    tasks_max: int | None = None

    def any(self) -> bool:
        return (self.memory_max, self.cpu_weight, self.tasks_max) != (None, None, None)


@dataclass(frozen=True)
class SingletonSpec:
    """Run on one host of the cluster at a time: only while this host holds `lease`.

    A renewal is sent every ttl/3. If none has succeeded by ttl - margin after the send time
    of the last successful one, the component is stopped (stop signal, SIGKILL at its stop
    timeout): the margin is the stop timeout plus a guard, so it is dead before the lease
    can expire at the controller.
    """

    lease: str
    ttl: float = 15.0

    @property
    def guard(self) -> float:
        """Time left between the component's SIGKILL and the lease's earliest expiry."""
        return max(0.1 * self.ttl, 0.25)

    @property
    def max_stop_timeout(self) -> float:
        """The longest stop timeout that keeps at least half the TTL for renewals."""
        return max(0.0, self.ttl / 2 - self.guard)


@dataclass(frozen=True)
class ComponentSpec:
    """One supervised program."""

    name: str
    command: tuple[str, ...]
    role: str = ""
    user: str | None = None
    group: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    working_directory: str | None = None
    stop_signal: int = STOP_SIGNAL
    stop_timeout: float = STOP_TIMEOUT
    restart: RestartSpec = field(default_factory=RestartSpec)
    liveness: ProbeSpec | None = None
    decommission_exit_codes: frozenset[int] = frozenset()
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    notice_signal: int | None = None  # sent when a preemption or maintenance notice arrives
    singleton: SingletonSpec | None = None
