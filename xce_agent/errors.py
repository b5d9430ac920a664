"""The agent's own errors (the shared ones live in xce_protocol.errors)."""

from __future__ import annotations

from xce_protocol.errors import ConfigError, XceError

AgentError = XceError

__all__ = ["AgentError", "ConfigError", "StateError"]


class StateError(XceError):
    """The local state directory cannot be used."""
