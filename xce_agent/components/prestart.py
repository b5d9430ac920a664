"""The pre-start invariant: never two copies of a component, whatever happened before.

Before every start of a component (its first start, a restart, a reload, a start after an
adoption that did not take), `PreStart.before_start` establishes that no live process on the
host carries the component's recorded identity, in whatever cgroup or session it sits:

- a process with the exact pid, start time and boot of an identity recorded for the
  component (by this agent or an earlier one), started as this agent's component (its
  environment's marks) or sitting in the component's cgroup;
- a process started under a start intent whose identity never reached the disk (the agent
  was killed between the start and the save): a session leader, started after the intent
  was written, with the component's marks.

Each is stopped (SIGKILL to it and its process group) before the start goes on; adoption
(adoption.py, ProcessRunner.adopt) runs first, so a copy that can be adopted is adopted.
Marks alone never make a process ours: a job of the worker inherits them.

Then the start is written ahead: the intent is saved and fsync'ed before the exec, and the
new identity after it. If either save fails the component is not started (or the new copy
is stopped at once), and the supervisor retries after a backoff with the reason code
`state_unwritable` (machine.Deferred).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from xce_agent.state import AgentState, StartIntent
from xce_agent.supervision.boot import boot_id, boot_time, same_boot
from xce_agent.supervision.identity import CLOCK_TICKS, ProcessIdentity, start_ticks
from xce_agent.supervision.process import carries_marks
from xce_agent.supervision.supervisor import Supervisor

log = logging.getLogger(__name__)

STOP_WAIT = 5.0  # seconds a copy killed with SIGKILL may take to be gone

SaveIntents = Callable[[tuple[StartIntent, ...]], str]  # "" once saved, else why not


@dataclass(frozen=True)
class Copy:
    """A live process that is a copy of the component the supervisor does not watch."""

    pid: int
    ticks: int
    how: str  # how it was known, for the log


def ticks_now() -> int:
    """Clock ticks since boot now, never later than a process started from now on shows."""
    clocks = (time.clock_gettime(time.CLOCK_BOOTTIME), time.clock_gettime(time.CLOCK_MONOTONIC))
    return max(0, int(min(clocks) * CLOCK_TICKS) - 1)


def _recorded_copy(
    name: str, identity: ProcessIdentity, owner: str, in_cgroup: Callable[[int], bool]
) -> Copy | None:
    if not same_boot(identity.boot_id, identity.boot_time):
        return None
    if start_ticks(identity.pid) != identity.ticks:
        return None
    if carries_marks(identity.pid, name, owner) or in_cgroup(identity.pid):
        return Copy(identity.pid, identity.ticks, "its recorded identity")
    return None


def _intent_copies(intent: StartIntent) -> list[Copy]:
    """Processes started under `intent` (a start whose identity was never saved)."""
    if not same_boot(intent.boot_id, intent.boot_time):
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        ticks = start_ticks(pid)
        if ticks < intent.after_ticks or pid == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if os.getsid(pid) == pid and carries_marks(pid, intent.name, intent.owner):
                found.append(Copy(pid, ticks, "a start whose identity was never saved"))
    return found


def live_copies(
    name: str,
    known: Iterable[ProcessIdentity],
    intents: Iterable[StartIntent],
    owner: str,
    watched: Iterable[int],
    in_cgroup: Callable[[int], bool] = lambda pid: False,
) -> list[Copy]:
    """Every live copy of `name` other than the watched processes (the one invariant)."""
    skip = set(watched)
    copies: dict[int, Copy] = {}
    for identity in known:
        copy = _recorded_copy(name, identity, owner, in_cgroup)
        if copy is not None and copy.pid not in skip:
            copies.setdefault(copy.pid, copy)
    for intent in intents:
        if intent.name == name:
            for copy in _intent_copies(intent):
                if copy.pid not in skip:
                    copies.setdefault(copy.pid, copy)
    return sorted(copies.values(), key=lambda c: c.ticks)


def stop_copies(copies: Iterable[Copy], timeout: float = STOP_WAIT) -> list[int]:
    """SIGKILL each copy (through a pidfd: a reused pid is never hit) and its own process
    group; the pids still alive after `timeout`."""
    fds: dict[int, int] = {}
    for copy in copies:
        try:
            fd = os.pidfd_open(copy.pid)
        except OSError:
            continue
        if start_ticks(copy.pid) != copy.ticks:  # gone and reused before the pidfd
            os.close(fd)
            continue
        fds[copy.pid] = fd
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        with contextlib.suppress(OSError):
            if os.getpgid(copy.pid) == copy.pid and copy.pid != os.getpgrp():
                os.killpg(copy.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    alive = dict(fds)
    while alive and time.monotonic() < deadline:
        ready, _, _ = select.select(list(alive.values()), [], [], deadline - time.monotonic())
        for pid, fd in list(alive.items()):
            if fd in ready:
                del alive[pid]
    for fd in fds.values():
        os.close(fd)
    return sorted(alive)


class PreStart:
    """The supervisor's start guard (Supervisor.guard): the invariant, then the write-ahead.

    `save` writes the agent's state with the given intents (and the components' records as
    the supervisor knows them now) and waits until it is on disk.
    """

    def __init__(self, supervisor: Supervisor, owner: str, save: SaveIntents) -> None:
        self.supervisor = supervisor
        self.owner = owner
        self.save = save
        self.known: dict[str, list[ProcessIdentity]] = {}  # identities recorded before
        self.intents: dict[str, StartIntent] = {}  # starts begun, their identity not saved

    def remember(self, previous: AgentState | None) -> None:
        """What an earlier agent recorded: identities and unfinished starts."""
        for record in previous.components if previous else ():
            identity = ProcessIdentity.from_json(record.identity) if record.identity else None
            if identity is not None:
                self.known.setdefault(record.name, []).append(identity)
        for intent in previous.starting if previous else ():
            self.intents[intent.name] = intent

    def intents_now(self) -> tuple[StartIntent, ...]:
        return tuple(self.intents.values())

    def before_start(self, name: str) -> str:
        """ "" when `name` may be started now, else why not (retried later)."""
        sup = self.supervisor
        tree = sup.containment()
        in_cgroup = (lambda pid: tree.contains(name, pid)) if tree else (lambda pid: False)
        known = [i for i in self.known.get(name, []) if start_ticks(i.pid) == i.ticks]
        self.known[name] = known  # the dead ones never come back (exact start time)
        intents = [i for i in self.intents.values() if i.name == name]
        copies = live_copies(name, known, intents, self.owner, sup.watched_pids(), in_cgroup)
        if copies:
            shown = ", ".join(f"{c.pid} ({c.how})" for c in copies)
            log.warning("%s: a copy runs unsupervised: %s; stopped before the start", name, shown)
            left = stop_copies(copies)
            if left:
                return f"a copy (pid {left[0]}) could not be stopped"
        self.intents[name] = StartIntent(name, boot_id(), ticks_now(), self.owner, boot_time())
        return self.save(self.intents_now())

    def started(self, name: str, identity: ProcessIdentity) -> str:
        """The new process's identity on disk: "" once saved, else why not (then the
        supervisor stops the new process at once)."""
        self.known.setdefault(name, []).append(identity)
        intent = self.intents.pop(name, None)
        why = self.save(self.intents_now())
        if why and intent is not None:
            self.intents[name] = intent  # still on disk: its window must be searched
        return why
