"""The agent's own errors (the shared ones live in xce_protocol.errors)."""

from __future__ import annotations

from xce_protocol.errors import ConfigError, UsageError, XceError

AgentError = XceError

__all__ = [
    "AgentError",
    "ConfigError",
    "NoState",
    "StateError",
    "StateNotPermitted",
    "StopTimedOut",
    "UnexpectedEvent",
    "UsageError",
]


class StateError(XceError):
    """The local state directory cannot be used."""


class StateNotPermitted(StateError):
    """The state cannot be read for want of permission (`status` not run as root)."""


class NoState(XceError):
    """`status` found no state: the agent has not run here."""

    exit_code = 3


class StopTimedOut(XceError):
    """The agent did not stop within the time `xce-agent stop` waits."""


class UnexpectedEvent(Exception):
    """An event a pure machine's table refuses in its current state (supervision/machine.py's
    `ALLOWED` by phase, core/membership.py's `allowed` by standing). Raised, never absorbed
    (as h11's machine does): the caller logs it with reason code unexpected_event and drops
    the event, and a test that provokes one fails. No XceError: it is never a command's
    message and exit code."""
