"""The exception hierarchy both sides share: a base and one subclass per failure a CLI maps."""

from __future__ import annotations


class XceError(Exception):
    """Base of every error raised on purpose; `exit_code` is what a CLI exits with."""

    exit_code = 1


class ConfigError(XceError):
    """The configuration is unusable; `problems` holds one human line per problem."""

    exit_code = 78  # EX_CONFIG

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
