"""The agent's exception hierarchy: one base, one subclass per kind of failure the CLI maps."""

from __future__ import annotations


class AgentError(Exception):
    """Base of every error the agent raises on purpose."""


class ConfigError(AgentError):
    """The configuration is unusable; `problems` holds one human line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class StateError(AgentError):
    """The local state directory cannot be used."""
