"""Which process a pid is: the identity recorded at start and checked before adoption.

A pid alone names nothing across time: pids are reused, and a state file can be edited. A
process is the one the agent started only when its pid, its start time (exact, in clock
ticks since boot), the boot id, its executable and its command line all match what was
recorded the moment it started; anything else is another process.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, replace

from xce_agent.supervision.boot import boot_id, boot_time, same_boot
from xce_agent.supervision.spec import STOP_SIGNAL, STOP_TIMEOUT

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The kernel's PID_MAX_LIMIT: no pid is larger, and the os calls raise OverflowError (not
# OSError) for a pid past a C int, which made every later start of the agent fail.
PID_MAX = 1 << 22
_DELETED = " (deleted)"  # readlink of /proc/PID/exe once a package upgrade replaced the file


def start_ticks(pid: int) -> int:
    """When `pid` started, in clock ticks since boot (field 22 of /proc/PID/stat); 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return 0


def executable(pid: int) -> str:
    try:
        target = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""
    return target[: -len(_DELETED)] if target.endswith(_DELETED) else target


def command_line(pid: int) -> tuple[str, ...]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read(256 * 1024)
    except OSError:
        return ()
    return tuple(part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0")[:-1])


def same_process(pid: int, ticks: int) -> bool:
    """`pid` is still the process that started at `ticks` (exact)."""
    return ticks > 0 and start_ticks(pid) == ticks


def spec_digest(parts: Mapping[str, object]) -> str:
    """A short digest of what a component was started from: a changed config is seen."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ProcessIdentity:
    """What makes a pid the process we started, across agent restarts.

    `exe` and `cmdline` are what /proc showed right after the start (a script shows its
    interpreter); `command` and `digest` are the configured command and settings it was
    started from; `cgroup` is its cgroup (relative to the agent's) when contained.
    """

    pid: int
    ticks: int
    boot_id: str
    exe: str
    cmdline: tuple[str, ...]
    command: tuple[str, ...] = ()
    digest: str = ""
    cgroup: str = ""
    # How to stop it, kept for when its component is no longer in the config.
    stop_signal: int = STOP_SIGNAL
    stop_timeout: float = STOP_TIMEOUT
    boot_time: float = 0.0  # btime of the boot it started in (see same_boot)

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "start_ticks": self.ticks,
            "boot_id": self.boot_id,
            "exe": self.exe,
            "cmdline": list(self.cmdline),
            "command": list(self.command),
            "digest": self.digest,
            "cgroup": self.cgroup,
            "stop_signal": self.stop_signal,
            "stop_timeout": self.stop_timeout,
            "boot_time": self.boot_time,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProcessIdentity | None:
        if "start_ticks" not in data:
            return cls._legacy(data)
        pid, ticks, boot = data.get("pid"), data.get("start_ticks"), data.get("boot_id")
        exe, cmdline = data.get("exe"), data.get("cmdline")
        command, digest, cgroup = (
            data.get("command", []),
            data.get("digest", ""),
            data.get("cgroup", ""),
        )
        if not (isinstance(pid, int) and isinstance(ticks, int) and isinstance(boot, str)):
            return None
        if not (isinstance(exe, str) and isinstance(cmdline, list) and isinstance(command, list)):
            return None
        if not (isinstance(digest, str) and isinstance(cgroup, str)) or not 0 < pid <= PID_MAX:
            return None
        stop_signal, stop_timeout = (
            data.get("stop_signal", STOP_SIGNAL),
            data.get("stop_timeout", STOP_TIMEOUT),
        )
        if not isinstance(stop_signal, int) or not isinstance(stop_timeout, (int, float)):
            return None
        if not 0 < stop_signal < signal.NSIG or ticks < 0:
            return None
        if not 0.0 <= float(stop_timeout) <= 7 * 86400.0:  # NaN fails this too
            return None
        btime = data.get("boot_time", 0.0)
        if not isinstance(btime, (int, float)) or not 0.0 <= float(btime) < 1e11:
            return None
        return cls(
            pid,
            ticks,
            boot,
            exe,
            tuple(str(x) for x in cmdline),
            tuple(str(x) for x in command),
            digest,
            cgroup,
            stop_signal,
            float(stop_timeout),
            float(btime),
        )

    @classmethod
    def _legacy(cls, data: Mapping[str, object]) -> ProcessIdentity | None:
        """A record of the previous format: start time in epoch seconds, configured command.

        Its executable and /proc command line were not recorded, so only pid, start time
        and boot id are checked (an upgrade must not lose, or duplicate, the worker).
        """
        pid, created = data.get("pid"), data.get("create_time")
        command, boot = data.get("cmdline"), data.get("boot_id")
        if not (isinstance(pid, int) and isinstance(created, (int, float))):
            return None
        if not 0 < pid <= PID_MAX or not math.isfinite(created):
            return None
        if not (isinstance(command, list) and isinstance(boot, str)):
            return None
        ticks = round((float(created) - boot_time()) * CLOCK_TICKS)
        return cls(pid, ticks, boot, "", (), tuple(str(x) for x in command))

    def started_epoch(self) -> float:
        """Wall-clock start time, for display and uptime."""
        return boot_time() + self.ticks / CLOCK_TICKS


def observe(
    pid: int, command: tuple[str, ...] = (), digest: str = "", cgroup: str = ""
) -> ProcessIdentity:
    """The identity of `pid` as it is now (right after it was started)."""
    return ProcessIdentity(
        pid,
        start_ticks(pid),
        boot_id(),
        executable(pid),
        command_line(pid),
        command,
        digest,
        cgroup,
        # Without it same_boot cannot tell one boot seen two ways (a shell's and a
        # service's view of a container's boot id) from a reboot.
        boot_time=boot_time(),
    )


def mismatch(recorded: ProcessIdentity, program: bool = True) -> str:
    """Why the live `recorded.pid` is not the recorded process; "" when it is.

    `program=False` leaves out the executable and command line (for a process whose
    cgroup vouches for it, see ProcessRunner.adopt).
    """
    if not same_boot(recorded.boot_id, recorded.boot_time):
        return "recorded in another boot"
    if not same_process(recorded.pid, recorded.ticks):
        return "no process with that pid and start time"
    if not program:
        return ""
    if recorded.exe and executable(recorded.pid) != recorded.exe:
        return f"runs {executable(recorded.pid) or 'an unknown executable'}, not {recorded.exe}"
    if recorded.cmdline and command_line(recorded.pid) != recorded.cmdline:
        return "its command line differs from the recorded one"
    return ""


def current(recorded: ProcessIdentity) -> ProcessIdentity:
    """`recorded` with the executable and command line its process shows now.

    A wrapper that execs its daemon, or a daemon that re-execs itself or rewrites its
    argv, keeps its pid and start time but no longer shows what was seen at its start; the
    next agent must still know it. Only a process still watched and with the exact start
    time recorded is re-read (so it is the one we started); anything else is left as is.
    """
    if not same_process(recorded.pid, recorded.ticks):
        return recorded
    exe, cmdline = executable(recorded.pid), command_line(recorded.pid)
    if not exe or (exe, cmdline) == (recorded.exe, recorded.cmdline):
        return recorded  # a zombie shows no executable: keep what was seen
    return replace(recorded, exe=exe, cmdline=cmdline)
