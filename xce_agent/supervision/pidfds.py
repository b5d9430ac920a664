"""The components' live processes, each watched through its pidfd on the reactor.

An exit is reaped and reported once, for the process that was watched (a handle replaced
meanwhile is not forgotten by its predecessor's exit); a signal goes through the pidfd, so
a reused pid never gets it; letting go (an agent restart) leaves the processes running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable
from typing import Optional

from xce_agent.supervision.identity import ProcessIdentity, current
from xce_agent.supervision.process import Handle, ProcessRunner
from xce_agent.supervision.reactor import Reactor

# name, exit code, signal, pid: what an exit tells the owner
ExitCallback = Callable[[str, Optional[int], Optional[int], int], None]


class Pidfds:
    """The live processes by component name; all methods run on the reactor's thread."""

    def __init__(self, reactor: Reactor, runner: ProcessRunner, exited: ExitCallback) -> None:
        self._reactor = reactor
        self._runner = runner
        self._exited = exited
        self._handles: dict[str, Handle] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._handles

    def __len__(self) -> int:
        return len(self._handles)

    def watch(self, name: str, handle: Handle) -> None:
        self._handles[name] = handle
        self._reactor.add_reader(handle.pidfd, lambda: self._on_exit(name, handle))

    def send_signal(self, name: str, signum: int) -> bool:
        """Signal the component's process through its pidfd, so a reused pid never gets it;
        False when it has no process."""
        handle = self._handles.get(name)
        if handle is None:
            return False
        try:
            signal.pidfd_send_signal(handle.pidfd, signum)
        except ProcessLookupError:
            return False
        return True

    def pids(self) -> list[int]:
        return [handle.pid for handle in self._handles.values()]

    def identities(self) -> dict[str, ProcessIdentity]:
        """The identities to record, following an exec since the start (see `current`)."""
        for handle in self._handles.values():
            handle.identity = current(handle.identity)
        return {name: handle.identity for name, handle in self._handles.items()}

    def discard(self, name: str, handle: Handle) -> None:
        """Kill a process just started whose record could not be saved, and wait for it."""
        self._runner.signal_group(handle.pid, signal.SIGKILL, name)
        self._reactor.remove_reader(handle.pidfd)
        if handle.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                handle.popen.wait(timeout=5)
        os.close(handle.pidfd)
        if self._handles.get(name) is handle:
            del self._handles[name]

    def close(self) -> None:
        """Let go of every process without touching it (agent restart)."""
        for name in list(self._handles):
            handle = self._handles.pop(name)
            self._reactor.remove_reader(handle.pidfd)
            os.close(handle.pidfd)

    def _on_exit(self, name: str, handle: Handle) -> None:
        self._reactor.remove_reader(handle.pidfd)
        code, signum = self._runner.reap(handle)
        if self._handles.get(name) is handle:
            del self._handles[name]
        self._exited(name, code, signum, handle.pid)
