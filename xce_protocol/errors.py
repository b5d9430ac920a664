"""The exception hierarchy both sides share: a base and one subclass per failure a CLI maps."""

from __future__ import annotations


class XceError(Exception):
    """Base of every error raised on purpose; `exit_code` is what a CLI exits with."""

    exit_code = 1

    def lines(self) -> list[str]:
        """What a CLI prints for it, one line each."""
        return [str(self)]


class UsageError(XceError):
    """A command line that cannot be carried out as written (a bad option value)."""

    exit_code = 2


class ConfigError(XceError):
    """The configuration is unusable; `problems` holds one human line per problem."""

    exit_code = 78  # EX_CONFIG

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems

    def lines(self) -> list[str]:
        return list(self.problems)
