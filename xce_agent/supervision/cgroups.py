"""Containment by cgroup v2: each component in its own child cgroup of the agent's.

Under systemd with `Delegate=yes` the agent owns its unit's cgroup. It moves itself into the
leaf `agent/` (cgroup v2 lets processes live only in leaves once children exist) and starts
each component inside `component-NAME/`, so whatever the component forks, double-forks or
setsid()s stays accounted to it: a stop kills the whole cgroup (`cgroup.kill`, or SIGKILL to
every member where the kernel lacks it), and membership is part of a process's identity.
Without a delegated cgroup the caller falls back to process groups and says so.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from xce_agent.supervision.spec import ResourceLimits

log = logging.getLogger(__name__)

LEAF_PREFIX = "component-"
AGENT_LEAF = "agent"
# Set by the caller to use a cgroup it created and owns, outside systemd (tests, containers).
CGROUP_ENV = "XCE_AGENT_CGROUP"


@dataclass(frozen=True)
class Detection:
    tree: CgroupTree | None
    description: str  # shown by `status`: how components are contained, and why


class CgroupTree:
    """The agent's delegated cgroup `root`; components live in `root/component-NAME`."""

    def __init__(self, root: Path, may_enable: bool = False) -> None:
        self.root = root
        # Whether controllers may be enabled on `root`: only when no process is ever placed
        # in it (systemd's DelegateSubgroup= starts the agent in agent/ already). Otherwise
        # systemd could not start the next agent in the unit's cgroup (cgroup v2's "no
        # internal processes" rule), so limits stay unenforced and the log says so.
        self.may_enable = may_enable

    def describe(self) -> str:
        return f"cgroup {self.root}"

    # --- set-up -----------------------------------------------------------------------
    def enter_agent_leaf(self) -> None:
        """Move this process (all its threads) into `root/agent`."""
        leaf = self.root / AGENT_LEAF
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def leaf(self, name: str) -> Path:
        return self.root / f"{LEAF_PREFIX}{name}"

    def relative(self, name: str) -> str:
        return f"{LEAF_PREFIX}{name}"

    def names(self) -> list[str]:
        """Components that have a cgroup here (also ones no longer configured)."""
        try:
            entries = sorted(os.listdir(self.root))
        except OSError:
            return []
        return [e[len(LEAF_PREFIX) :] for e in entries if e.startswith(LEAF_PREFIX)]

    def open_procs(self, name: str, limits: ResourceLimits) -> int:
        """An fd on the leaf's cgroup.procs; a child that writes "0" into it moves in.

        Opened by the agent (root): cgroup v2 checks a migration against the credentials
        of whoever opened the file, so a child that already switched user can still move.
        """
        leaf = self.leaf(name)
        leaf.mkdir(exist_ok=True)
        self.apply_limits(name, limits)
        return os.open(leaf / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def apply_limits(self, name: str, limits: ResourceLimits) -> list[str]:
        """Write the limits the kernel offers here; the names of those it does not."""
        missing = []
        wanted = {
            "memory.max": limits.memory_max,
            "cpu.weight": limits.cpu_weight,
            "pids.max": limits.tasks_max,
        }
        for filename, value in wanted.items():
            if value is None:
                continue
            path = self.leaf(name) / filename
            if not path.exists() and self.may_enable:
                self._enable(filename.split(".")[0])
            try:
                path.write_text(f"{value}\n")
            except OSError:
                missing.append(filename)
        if missing:
            how = "" if self.may_enable else " (needs DelegateSubgroup=agent, systemd 254+)"
            log.warning(
                "%s: %s not enforced: the controller is not enabled for the agent's cgroup%s",
                name,
                ", ".join(missing),
                how,
            )
        return missing

    def _enable(self, controller: str) -> None:
        with contextlib.suppress(OSError):
            if controller in (self.root / "cgroup.controllers").read_text().split():
                (self.root / "cgroup.subtree_control").write_text(f"+{controller}\n")

    def move(self, name: str, pid: int) -> None:
        """Move `pid` and the rest of its process group into the component's leaf."""
        leaf = self.leaf(name)
        leaf.mkdir(exist_ok=True)
        try:
            group = os.getpgid(pid)
        except OSError:
            return
        for member in [pid, *_group_members(group)]:
            with contextlib.suppress(OSError):
                (leaf / "cgroup.procs").write_text(f"{member}\n")

    # --- membership -------------------------------------------------------------------
    def pids(self, name: str) -> list[int]:
        try:
            text = (self.leaf(name) / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(line) for line in text.split()]

    def populated(self, name: str) -> bool:
        try:
            text = (self.leaf(name) / "cgroup.events").read_text()
        except FileNotFoundError:
            return False
        except OSError:
            return bool(self.pids(name))
        return "populated 1" in text

    def contains(self, name: str, pid: int) -> bool:
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return False
        mine = _own_path(text)
        return mine is not None and mine.rstrip("/").endswith("/" + self.relative(name))

    # --- signals ----------------------------------------------------------------------
    def signal(self, name: str, signum: int) -> None:
        for pid in self.pids(name):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def kill(self, name: str) -> None:
        """SIGKILL every process of the leaf, including ones forked meanwhile."""
        if not self.leaf(name).exists():
            return
        try:
            fd = os.open(self.leaf(name) / "cgroup.kill", os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EACCES, errno.EPERM):
                raise
        else:
            try:
                os.write(fd, b"1")
                return
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                    raise
            finally:
                os.close(fd)
        # Kernels before 5.14: kill what is there until nothing is left (forks race us).
        for _ in range(100):
            pids = self.pids(name)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.001)

    def wait_empty(self, name: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.populated(name):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def remove(self, name: str) -> None:
        with contextlib.suppress(OSError):
            self.leaf(name).rmdir()


def enter(detection: Detection) -> Detection:
    """Move this process into the agent's leaf; on failure, the process-group fallback."""
    tree = detection.tree
    if tree is None:
        return detection
    try:
        tree.enter_agent_leaf()
    except OSError as exc:
        reason = f"cannot use {tree.root}: {exc.strerror or exc}"
        return Detection(
            None, f"process groups (a component that leaves its group escapes a stop): {reason}"
        )
    return detection


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError):
                if os.getpgid(int(entry)) == pgid:
                    members.append(int(entry))
    return members


def _own_path(proc_cgroup: str) -> str | None:
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def _cgroup2_mount() -> Path | None:
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    return None


def detect() -> Detection:
    """The delegated cgroup this agent may use, or why it falls back to process groups."""
    fallback = "process groups (a component that leaves its group escapes a stop): "
    explicit = os.environ.get(CGROUP_ENV)
    if explicit:
        root = Path(explicit)
        if not (root / "cgroup.procs").exists():
            return Detection(None, fallback + f"{CGROUP_ENV}={explicit} is not a cgroup")
        return Detection(CgroupTree(root, may_enable=True), f"cgroup {root} (from {CGROUP_ENV})")
    mount = _cgroup2_mount()
    try:
        own = _own_path(Path("/proc/self/cgroup").read_text())
    except OSError:
        own = None
    if mount is None or own is None:
        return Detection(None, fallback + "no cgroup v2 hierarchy")
    here = mount / own.lstrip("/")
    in_leaf = here.name == AGENT_LEAF and _delegated(here.parent)
    root = here.parent if in_leaf else here
    if own == "/" or not _delegated(root):
        return Detection(None, fallback + f"cgroup {root} is not delegated (Delegate=yes)")
    if not os.access(root, os.W_OK):
        return Detection(None, fallback + f"cgroup {root} is not writable")
    return Detection(CgroupTree(root, may_enable=in_leaf), f"cgroup {root} (delegated)")


def _delegated(path: Path) -> bool:
    """systemd marks a delegated cgroup with the trusted.delegate (or user.delegate) xattr."""
    for attr in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            if os.getxattr(path, attr).strip(b"\0") == b"1":
                return True
    return _unit_delegates(path)


def _unit_delegates(path: Path) -> bool:
    """Older systemd sets no xattr: ask it whether the unit that owns `path` delegates."""
    unit = path.name
    if not unit.endswith(".service") or "INVOCATION_ID" not in os.environ:
        return False
    try:
        out = subprocess.run(
            ["systemctl", "show", "-p", "Delegate", "--value", unit],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.strip() == "yes"
