"""Containment by cgroup v2: each component in its own child cgroup of the agent's.

Under systemd with `Delegate=yes` the agent owns its unit's cgroup. It moves itself into the
leaf `agent/` (cgroup v2 lets processes live only in leaves once children exist) and starts
each component inside `component-NAME/`, so whatever the component forks, double-forks or
setsid()s stays accounted to it: a stop kills the whole cgroup (`cgroup.kill`, or SIGKILL to
every member where the kernel lacks it), and membership is part of a process's identity.
A component with limits is started in a systemd scope instead where systemd runs the host
(scopes.py): its cgroup is then the scope's. Either way a component's cgroups are derived
from the agent's own cgroup (or slice) and its name, never read from the state, and a
process is the component's only if it is in one of them. Without a delegated cgroup the
caller falls back to process groups and says so.
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

from xce_agent.supervision import scopes as sc
from xce_agent.supervision.spec import ComponentSpec, ResourceLimits

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

    def __init__(
        self,
        root: Path,
        may_enable: bool = False,
        scopes: sc.Scopes | None = None,
        mount: Path | None = None,
    ) -> None:
        self.root = root
        self.scopes = scopes  # where components with limits run, when systemd runs the host
        self.mount = mount or cgroup2_mount() or Path("/sys/fs/cgroup")
        # Whether controllers may be enabled on `root`: only when no process is ever placed
        # in it (systemd's DelegateSubgroup= starts the agent in agent/ already). Otherwise
        # systemd could not start the next agent in the unit's cgroup (cgroup v2's "no
        # internal processes" rule): limits are then enforced by systemd scopes (`scopes`),
        # or not at all, and the log and `status` say so.
        self.may_enable = may_enable

    def describe(self) -> str:
        return f"cgroup {self.root}"

    def limits_note(self, spec: ComponentSpec) -> str:
        """How `spec`'s limits are enforced, for `status`; "" when it has none."""
        if not spec.limits.any():
            return ""
        if self.scopes is not None and self.scoped(spec):
            missing = self.scopes.unenforced(spec.limits)
            where = f"systemd scope {self.scopes.unit(spec.name)}"
            if missing:
                return (
                    f"{', '.join(missing)} NOT enforced (no such controller on this host); {where}"
                )
            return f"enforced by {where}"
        if self.may_enable:
            missing = sc.unenforced(spec.limits, self.root)
            if missing:
                return f"{', '.join(missing)} NOT enforced (no such controller in {self.root})"
            return f"enforced in {self.leaf(spec.name)}"
        return "NOT enforced: no systemd scopes here, and no controllers in the agent's cgroup"

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

    def leaves(self, name: str) -> list[Path]:
        """Every cgroup the component may have processes in: its leaf, and its scope."""
        return [self.leaf(name), *([self.scopes.cgroup(name)] if self.scopes else [])]

    def scoped(self, spec: ComponentSpec) -> bool:
        """`spec` starts in a systemd scope: it has limits only systemd can enforce here."""
        if self.scopes is None or not self.scopes.starts:
            return False
        return spec.limits.any() and not self.may_enable

    def recorded_path(self, spec: ComponentSpec) -> str:
        """Where `spec` runs, for the record (shown, never trusted when read back)."""
        if self.scopes is not None and self.scoped(spec):
            return str(self.scopes.cgroup(spec.name).relative_to(self.mount))
        return self.relative(spec.name)

    def names(self) -> list[str]:
        """Components that have a cgroup here (also ones no longer configured)."""
        try:
            entries = sorted(os.listdir(self.root))
        except OSError:
            entries = []
        names = {e[len(LEAF_PREFIX) :] for e in entries if e.startswith(LEAF_PREFIX)}
        return sorted(names | set(self.scopes.names() if self.scopes else ()))

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
            how = "" if self.may_enable else " (and systemd scopes are not available)"
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
        found: list[int] = []
        for leaf in self.leaves(name):
            try:
                found += [int(line) for line in (leaf / "cgroup.procs").read_text().split()]
            except OSError:
                continue
        return found

    def populated(self, name: str) -> bool:
        return any(_populated(leaf) for leaf in self.leaves(name))

    def cgroup_of(self, pid: int) -> Path | None:
        """The cgroup `pid` is in, as a directory of the cgroup2 mount; None if gone."""
        try:
            mine = _own_path(Path(f"/proc/{pid}/cgroup").read_text())
        except OSError:
            return None
        return None if mine is None else self.mount / mine.strip("/")

    def contains(self, name: str, pid: int) -> bool:
        """`pid` is in one of the component's own cgroups (the exact directories)."""
        return self.cgroup_of(pid) in self.leaves(name)

    # --- signals ----------------------------------------------------------------------
    def signal(self, name: str, signum: int) -> None:
        for pid in self.pids(name):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def kill(self, name: str) -> None:
        """SIGKILL every process of the component's cgroups, including ones forked meanwhile."""
        if self.contains(name, os.getpid()):
            # A component running as root may have moved the agent into its own cgroup: the
            # kill would take the agent with it (and outside systemd nothing starts it again).
            log.warning("%s: the agent was moved into its cgroup: moving back first", name)
            with contextlib.suppress(OSError):
                self.enter_agent_leaf()
        for leaf in self.leaves(name):
            _kill(leaf)

    def remove(self, name: str) -> None:
        """Remove the component's leaf (systemd removes a scope once it is empty)."""
        with contextlib.suppress(OSError):
            self.leaf(name).rmdir()


def _populated(leaf: Path) -> bool:
    try:
        text = (leaf / "cgroup.events").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            return bool((leaf / "cgroup.procs").read_text().split())
        except OSError:
            return False
    return "populated 1" in text


def _kill(leaf: Path) -> None:
    if not leaf.exists():
        return
    try:
        fd = os.open(leaf / "cgroup.kill", os.O_WRONLY | os.O_CLOEXEC)
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
        try:
            pids = [int(x) for x in (leaf / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)


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


def cgroup2_mount() -> Path | None:
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    return None


def detect(state_directory: Path | None = None) -> Detection:
    """The delegated cgroup this agent may use, or why it falls back to process groups."""
    fallback = "process groups (a component that leaves its group escapes a stop): "
    explicit = os.environ.get(CGROUP_ENV)
    if explicit:
        root = Path(os.path.normpath(explicit))
        if not (root / "cgroup.procs").exists():
            return Detection(None, fallback + f"{CGROUP_ENV}={explicit} is not a cgroup")
        return Detection(CgroupTree(root, may_enable=True), f"cgroup {root} (from {CGROUP_ENV})")
    mount = cgroup2_mount()
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
    if in_leaf:
        return Detection(
            CgroupTree(root, may_enable=True, mount=mount),
            f"cgroup {root} (delegated); limits: in the component cgroups",
        )
    found, why = sc.detect(mount, state_directory or Path("."), root.name)
    limits = f"systemd scope units in {sc.SLICE}" if not why else f"not enforced ({why})"
    tree = CgroupTree(root, scopes=found, mount=mount)
    return Detection(tree, f"cgroup {root} (delegated); limits: {limits}")


def inherit(detection: Detection, recorded: str) -> Detection:
    """The cgroup an earlier agent recorded, for an agent with none of its own (started by
    hand from a shell after `systemctl stop`, which leaves components running by design)
    while that cgroup still holds the earlier agent's components: they are then adopted,
    stopped and restarted where they live, so none runs beyond this agent's stop."""
    mount = cgroup2_mount()
    root = Path(os.path.normpath(recorded)) if recorded else None
    if detection.tree is not None or mount is None or root is None:
        return detection
    if mount not in root.parents or not root.is_dir() or not _delegated(root):
        return detection
    tree = CgroupTree(root, mount=mount)
    if not os.access(root, os.W_OK) or not any(tree.populated(n) for n in tree.names()):
        return detection
    why = "an earlier agent's, which still holds its components"
    return Detection(tree, f"cgroup {root} ({why}); limits: in the component cgroups")


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
