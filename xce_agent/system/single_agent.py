"""One agent per state directory, guaranteed without trusting a file nobody deletes.

Three checks, any of which refuses a second agent: an exclusive flock on the state directory
itself (not on a file in it), an abstract unix socket named after the root file system and the
directory's path (held by the kernel for the live process: deleting or recreating the
directory does not release it), and the identity of the agent recorded in the state
(pid, start time in clock ticks, boot) when that process still runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from xce_agent.errors import StateError
from xce_agent.state import AgentRecord, AgentState
from xce_agent.supervision.boot import same_boot
from xce_agent.supervision.identity import CLOCK_TICKS, same_process


class AlreadyRunning(StateError):
    """Another agent holds the state directory: two would start components twice."""


@dataclass
class Held:
    dir_fd: int
    sock: socket.socket

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.dir_fd)
        self.sock.close()


def machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        with contextlib.suppress(OSError):
            text = Path(path).read_text().strip()
            if text:
                return text
    return ""


def abstract_name(directory: Path) -> bytes:
    """Per root file system and path: containers sharing a network namespace (and so the
    abstract socket names) each have their own root, so they do not collide."""
    root = os.stat("/")
    key = f"{root.st_dev}:{root.st_ino}:{machine_id()}:{directory.resolve()}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return b"\0xce-agent/" + digest.encode()


def live_agent(record: AgentRecord | None) -> bool:
    """The recorded agent is a running process (and not this one)."""
    if record is None or record.pid == os.getpid():
        return False
    started_boot = record.create_time - record.start_ticks / CLOCK_TICKS
    if not same_boot(record.boot_id, started_boot if record.start_ticks else 0.0):
        return False
    return same_process(record.pid, record.start_ticks)


def refuse_live(directory: Path, previous: AgentState | None) -> None:
    """AlreadyRunning when the state names an agent that still runs (read under the lock)."""
    record = previous.agent if previous else None
    if record is not None and live_agent(record):
        raise AlreadyRunning(
            f"{directory}: another xce-agent is running with this state directory "
            f"(pid {record.pid}, recorded in its state)"
        )


def acquire(directory: Path, recorded: AgentRecord | None = None) -> Held:
    """Hold the state directory, or raise AlreadyRunning saying who holds it."""
    busy = f"{directory}: another xce-agent is running with this state directory"
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AlreadyRunning(busy) from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(abstract_name(directory))
    except OSError:
        sock.close()
        os.close(fd)
        raise AlreadyRunning(f"{busy} (it holds the directory's name)") from None
    if live_agent(recorded):
        assert recorded is not None
        Held(fd, sock).release()
        raise AlreadyRunning(f"{busy} (pid {recorded.pid}, recorded in its state)")
    return Held(fd, sock)
