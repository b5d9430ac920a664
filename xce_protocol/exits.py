"""Where errors become messages: the click group every command line of the project uses.

Commands and everything below them raise typed errors (`XceError` and its subclasses carry
their exit code); this group prints each as one line prefixed with the program's name and
exits with that code. An OSError that reaches it (a file the user named, a directory the
program may not write) is one line and exit 1, not a traceback.
"""

from __future__ import annotations

from typing import Any

import click

from xce_protocol.errors import XceError


class ErrorExits(click.Group):
    """A click group whose commands' failures end as one line each and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except XceError as exc:
            self._report(exc.lines())
            ctx.exit(exc.exit_code)
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            self._report([f"{where}{exc.strerror or exc}"])
            ctx.exit(1)

    def _report(self, lines: list[str]) -> None:
        for line in lines:
            click.echo(f"{self.name}: {line}", err=True)
