"""Processes of a component that left its cgroup, killed with it.

A component running as root may write its own pid, or a child's, into another cgroup's
cgroup.procs: `cgroup.kill` of the component's cgroup then misses it, and a double-forking
daemon that did so ran on after a stop (a decommission included) and beside every restart.
Whatever the component started carries its marks (the environment at exec: component and
owner), so when the component's cgroup is killed, every marked process anywhere is killed
with it; at that moment none of them may run. Marks are never evidence that a process is
the component's running copy (jobs inherit them), only that it belongs to one.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

from xce_agent.supervision.identity import start_ticks

PASSES = 10  # a marked process may fork while it is killed: look again, a bounded number of times


def kill_marked(marked: Callable[[int], bool]) -> int:
    """SIGKILL (through a pidfd: a reused pid is never hit) every process `marked` accepts,
    other than this one; how many were killed."""
    killed: set[int] = set()
    for _ in range(PASSES):
        found = [pid for pid in _pids() if pid not in killed and marked(pid)]
        if not found:
            break
        for pid in found:
            if _kill(pid):
                killed.add(pid)
    return len(killed)


def _pids() -> list[int]:
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return [int(e) for e in entries if e.isdigit() and int(e) != me]


def _kill(pid: int) -> bool:
    ticks = start_ticks(pid)
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if start_ticks(pid) != ticks or not ticks:  # gone, and the pid reused, before the pidfd
            return False
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    finally:
        os.close(fd)
