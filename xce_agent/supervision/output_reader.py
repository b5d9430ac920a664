"""Read every component's output pipe on the reactor, and let a flood wait in its pipe.

Each component has one pipe (output.py) for stdout and stderr. Lines go to the journal
under the `xce_agent.component` logger; a component writing faster than the pipe's rate is
not read for a pause, so the kernel holds the flood (and blocks the writer) instead of the
agent's memory or its other components' exit handling.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path

from xce_agent.supervision.output import PAUSE, OutputPipe
from xce_agent.supervision.reactor import Reactor

output_log = logging.getLogger("xce_agent.component")


class OutputReaders:
    """The pipes by component name; all methods run on the reactor's thread.

    Without a directory there are no pipes: components then write where the agent does.
    """

    def __init__(
        self, directory: Path | None, reactor: Reactor, on_output: Callable[[str], None] | None
    ) -> None:
        if directory is not None:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._directory = directory
        self._reactor = reactor
        self._on_output = on_output
        self._pipes: dict[str, OutputPipe] = {}
        self._paused: set[str] = set()

    def open(self, name: str) -> None:
        if self._directory is not None and name not in self._pipes:
            pipe = OutputPipe(self._directory / f"{name}.out")
            self._pipes[name] = pipe
            self._reactor.add_reader(pipe.fd, functools.partial(self.read, name))

    def pipe(self, name: str) -> OutputPipe | None:
        return self._pipes.get(name)

    def tail(self, name: str) -> tuple[str, ...]:
        pipe = self._pipes.get(name)
        return tuple(pipe.tail) if pipe else ()

    def read_unless_paused(self, name: str) -> None:
        """What a component wrote before it exited, unless it is flooding."""
        if name not in self._paused:
            self.read(name)

    def read(self, name: str) -> None:
        pipe = self._pipes.get(name)
        if pipe is None:
            return
        batch = pipe.read()
        for line in batch.lines:
            output_log.info("%s: %s", name, line)
        if batch.lines and self._on_output is not None:
            self._on_output(name)
        if batch.throttled and name not in self._paused:
            self._paused.add(name)
            self._reactor.remove_reader(pipe.fd)
            self._reactor.call_later(PAUSE, lambda: self._resume(name, pipe))

    def close(self, name: str) -> None:
        pipe = self._pipes.pop(name, None)
        if pipe is not None:
            self._reactor.remove_reader(pipe.fd)
            pipe.close()

    def close_all(self) -> None:
        """Read what is left, then let go of every pipe (agent restart)."""
        for name in list(self._pipes):
            self.read(name)
            self.close(name)

    def _resume(self, name: str, pipe: OutputPipe) -> None:
        self._paused.discard(name)
        if self._pipes.get(name) is pipe:
            self._reactor.add_reader(pipe.fd, functools.partial(self.read, name))
