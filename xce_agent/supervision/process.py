"""Start, watch, signal and re-adopt component processes: the kernel side of supervision.

Each component runs in its own session and process group and, where the agent has a
delegated cgroup, in its own cgroup (see cgroups.py), so everything it forks can be
signalled and killed. Exits are noticed through a pidfd, which works for our children and
for processes we adopted after an agent restart (we are not their parent then, so their
exit status is unknown). Adoption checks the full recorded identity (identity.py) and, when
contained, that the process is still in the component's cgroup.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import grp
import logging
import os
import pwd
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace

from xce_agent.supervision import status_file as component_status
from xce_agent.supervision.boot import boot_id
from xce_agent.supervision.cgroups import CgroupTree
from xce_agent.supervision.escapes import kill_marked
from xce_agent.supervision.identity import (
    ProcessIdentity,
    current,
    executable,
    mismatch,
    observe,
    spec_digest,
)
from xce_agent.supervision.output import OutputPipe
from xce_agent.supervision.scopes import Scopes
from xce_agent.supervision.spec import ComponentSpec

log = logging.getLogger(__name__)
__all__ = ["Adoption", "Handle", "ProcessIdentity", "ProcessRunner", "SpawnError", "boot_id"]

# Variables that belong to the agent's own service and must not leak into components.
_PRIVATE_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID")


class SpawnError(Exception):
    """The component could not be started; the message says why in one line."""


@dataclass
class Handle:
    """A live component process: our child (`popen` set) or an adopted one."""

    identity: ProcessIdentity
    pidfd: int
    popen: subprocess.Popen[bytes] | None

    @property
    def pid(self) -> int:
        return self.identity.pid


@dataclass(frozen=True)
class Adoption:
    """What became of a recorded process: a handle, and whether it must be replaced."""

    handle: Handle | None
    replace: str = ""  # why the adopted process is to be stopped and started anew
    gone: str = ""  # why nothing was adopted


def digest_of(spec: ComponentSpec) -> str:
    return spec_digest(
        {
            "command": spec.command,
            "user": spec.user,
            "group": spec.group,
            "environment": dict(spec.environment),
            "working_directory": spec.working_directory,
        }
    )


# Every component carries these, for the programs it runs; the agent never adopts by them
# (jobs inherit them too).
MARK_COMPONENT = "XCE_AGENT_COMPONENT"
MARK_OWNER = "XCE_AGENT_OWNER"


def carries_marks(pid: int, name: str, owner: str) -> bool:
    """`pid` was started as component `name` of the agent of `owner` (its environment at
    exec says so). Never evidence alone (a job of the worker inherits the marks): only
    beside an exact pid and start time, or a start intent's window (prestart.py)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read(1024 * 1024)
    except OSError:
        return False
    entries = set(raw.split(b"\0"))
    wanted = {f"{MARK_COMPONENT}={name}".encode()}
    if owner:
        wanted.add(f"{MARK_OWNER}={owner}".encode())
    return wanted <= entries


def component_env(spec: ComponentSpec, base: Mapping[str, str], owner: str = "") -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in _PRIVATE_ENV}
    env[MARK_COMPONENT] = spec.name
    if owner:
        env[MARK_OWNER] = owner
    if spec.user is not None:
        entry = _passwd(spec.user)
        env.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)
    elif owner:  # as the agent's user it can write in the state directory: its status lines
        env[component_status.ENV] = os.path.join(owner, component_status.file_name(spec.name))
    env.update(spec.environment)
    return env


def _passwd(user: str) -> pwd.struct_passwd:
    return pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)


@dataclass(frozen=True)
class Credentials:
    user: int | None = None
    group: int | None = None
    extra_groups: list[int] | None = None


def credentials(user: str | None, group: str | None) -> Credentials:
    """The user, group and supplementary groups a component (or its probe) switches to."""
    if user is None and group is None:
        return Credentials()
    if os.geteuid() != 0:
        wanted = user or group
        raise SpawnError(f"cannot switch to {wanted!r}: the agent does not run as root")
    gid: int | None = None
    if group is not None:
        gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    if user is None:
        return Credentials(group=gid)
    entry = _passwd(user)
    gid = gid if gid is not None else entry.pw_gid
    return Credentials(entry.pw_uid, gid, os.getgrouplist(entry.pw_name, gid))


class ProcessRunner:
    """Real processes; tests of the agent wiring may substitute a fake with the same methods."""

    def __init__(
        self,
        base_env: Mapping[str, str] | None = None,
        owner: str = "",
        cgroups: CgroupTree | None = None,
    ) -> None:
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.owner = owner  # who started the process (the agent's state directory)
        self.cgroups = cgroups
        self._envs: dict[str, dict[str, str]] = {}
        self._extra: dict[str, dict[str, str]] = {}
        self._fds: dict[str, tuple[int, ...]] = {}

    def set_extra_env(self, name: str, env: Mapping[str, str], fds: tuple[int, ...] = ()) -> None:
        """Variables (and descriptors) the owner adds for the next starts of `name`."""
        self._extra[name] = dict(env)
        self._fds[name] = fds
        self._envs.pop(name, None)

    def forget_env(self, name: str) -> None:
        self._envs.pop(name, None)

    def ready(self, spec: ComponentSpec) -> bool:
        """`spec` can be started now: no scope of its previous run is still loaded."""
        tree = self.cgroups
        if tree is None or tree.scopes is None or not tree.scoped(spec):
            return True
        return not tree.scopes.loaded(spec.name)

    def spawn(self, spec: ComponentSpec, output: OutputPipe | None) -> Handle:
        out = output.child_fd() if output else subprocess.DEVNULL
        procs = -1
        tree = self.cgroups
        try:
            creds = credentials(spec.user, spec.group)
            argv = list(spec.command)
            if tree is not None and tree.scopes is not None and tree.scoped(spec):
                argv = _scoped(tree.scopes, spec, creds)
                creds = Credentials()  # systemd-run talks to systemd as root; setpriv switches
            elif tree is not None:
                procs = tree.open_procs(spec.name, spec.limits)
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                cwd=spec.working_directory,
                env=self._env(spec),
                start_new_session=True,
                user=creds.user,
                group=creds.group,
                extra_groups=creds.extra_groups,
                pass_fds=self._fds.get(spec.name, ()),
                # Runs in the child between fork and exec: one write, no Python-level locks.
                # The child is in its cgroup before it can fork anything.
                preexec_fn=(  # noqa: PLW1509 - a C call only, see above
                    functools.partial(os.write, procs, b"0") if procs >= 0 else None
                ),
            )
        except (OSError, KeyError, ValueError, SpawnError, subprocess.SubprocessError) as exc:
            raise SpawnError(_spawn_error_text(spec, exc)) from None
        finally:
            if output is not None and isinstance(out, int) and out >= 0:
                os.close(out)
            if procs >= 0:
                os.close(procs)
        pidfd = os.pidfd_open(popen.pid)
        cgroup = tree.recorded_path(spec) if tree else ""
        identity = replace(
            observe(popen.pid, spec.command, digest_of(spec), cgroup),
            stop_signal=spec.stop_signal,
            stop_timeout=spec.stop_timeout,
        )
        return Handle(identity, pidfd, popen)

    def _env(self, spec: ComponentSpec) -> dict[str, str]:
        env = self._envs.get(spec.name)
        if env is None:
            env = component_env(spec, self.base_env, self.owner)
            env.update(self._extra.get(spec.name, {}))
            self._envs[spec.name] = env
        return env

    def adopt(self, recorded: ProcessIdentity, spec: ComponentSpec) -> Adoption:
        """A handle on the recorded process if it is still that process, else why not."""
        try:
            pidfd = os.pidfd_open(recorded.pid)
        except OSError:
            return Adoption(None, gone="no process with that pid")
        # The pidfd was opened before the checks, so a pid reused after them cannot slip in.
        # Any mismatch means "gone": an edited state file must not make us signal a stranger
        # (a process of ours that changed itself is killed with its cgroup before the start).
        why = mismatch(recorded)
        if self.cgroups is not None:
            why, recorded = self._contained(recorded, spec, why)
        if why:
            os.close(pidfd)
            return Adoption(None, gone=why)
        handle = Handle(recorded, pidfd, None)
        changed = (
            recorded.digest != digest_of(spec)
            if recorded.digest
            else recorded.command != spec.command
        )
        if changed:
            return Adoption(handle, replace="its configured command or settings changed")
        return Adoption(handle, replace=self._limits_changed(recorded.pid, spec))

    def _contained(
        self, recorded: ProcessIdentity, spec: ComponentSpec, why: str
    ) -> tuple[str, ProcessIdentity]:
        """The process must be in one of the component's cgroups, derived here from the
        agent's own cgroup and the name: a path read from the state is never trusted."""
        tree = self.cgroups
        assert tree is not None
        where = tree.cgroup_of(recorded.pid)
        if where is not None and where in tree.leaves(spec.name):
            if why and not mismatch(recorded, program=False) and executable(recorded.pid):
                # Exact pid and start time, in the component's cgroup (only the agent puts a
                # process there): ours, exec'd since the last save of an agent killed -9.
                return "", current(recorded)
            return why, recorded
        if why:
            return why, recorded
        shown = "/" + str(where.relative_to(tree.mount)).strip(".") if where else "none"
        if where != tree.root and not carries_marks(recorded.pid, spec.name, self.owner):
            # Exact identity, but neither in this unit's cgroup nor started as this agent's
            # component: a stranger (a forged state), neither adopted nor signalled.
            return f"in cgroup {shown}, not in the component's cgroup", recorded
        # Ours, outside the component's cgroup: in the agent's own unit cgroup (started by an
        # agent from before containment), or in another agent's tree (the agent now runs in
        # another cgroup, or its tree was removed and made again while it was down). Moved
        # back in; one that cannot be moved is stopped before any start (prestart.py).
        tree.move(spec.name, recorded.pid)
        if not tree.contains(spec.name, recorded.pid):
            return f"in cgroup {shown}, and it could not be moved into its own", recorded
        if where != tree.root:
            log.warning("%s: process %d moved back from cgroup %s", spec.name, recorded.pid, shown)
        return "", replace(recorded, cgroup=tree.relative(spec.name))

    def _limits_changed(self, pid: int, spec: ComponentSpec) -> str:
        """Why an adopted process must be started anew: its limits were added, removed or
        changed meanwhile (a scope's limits are systemd's record of how it was created)."""
        tree = self.cgroups
        if tree is None or tree.scopes is None:
            return ""
        in_scope = tree.cgroup_of(pid) == tree.scopes.cgroup(spec.name)
        if tree.scoped(spec) and not in_scope:
            return "its limits are now enforced in a systemd scope"
        if in_scope and not tree.scoped(spec):
            gone = "systemd scopes can no longer be started here"
            return gone if spec.limits.any() else "its limits were removed"
        if in_scope and tree.scopes.started_with(spec.name) not in (None, spec.limits):
            return "its limits changed"
        return ""

    def limits_note(self, spec: ComponentSpec) -> str:
        """How the limits of `spec` are enforced here, for `status`; "" without limits."""
        if not spec.limits.any():
            return ""
        if self.cgroups is None:
            return "NOT enforced: no cgroup (process groups)"
        return self.cgroups.limits_note(spec)

    def reap(self, handle: Handle) -> tuple[int | None, int | None]:
        """(exit code, killing signal) once the pidfd said it exited; unknown if adopted."""
        os.close(handle.pidfd)
        if handle.popen is None:
            return None, None
        returncode = handle.popen.wait()
        if returncode < 0:
            return None, -returncode
        return returncode, None

    def signal_group(self, pid: int, signum: int, name: str = "") -> None:
        """`signum` to the process group of `pid`; SIGKILL takes the whole cgroup when contained."""
        if name and self.cgroups is not None and signum == signal.SIGKILL:
            self.cgroups.kill(name)
            self._kill_escaped(name)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)

    def kill_leftovers(self, name: str) -> int:
        """SIGKILL whatever is still in the component's cgroup, or left it; how many."""
        if self.cgroups is None:
            return 0
        count = len(self.cgroups.pids(name)) if self.cgroups.populated(name) else 0
        if count:
            self.cgroups.kill(name)
        return count + self._kill_escaped(name)

    def _kill_escaped(self, name: str) -> int:
        """Processes started as `name` that moved out of its cgroups (escapes.py)."""
        if not self.owner:  # the marks would not tell this agent's components from another's
            return 0
        escaped = kill_marked(lambda pid: carries_marks(pid, name, self.owner))
        if escaped:
            log.warning("%s: killed %d of its processes outside its cgroup", name, escaped)
        return escaped

    def contained_alive(self, name: str) -> bool:
        """Something still runs in the component's cgroup (always False without cgroups)."""
        return self.cgroups is not None and self.cgroups.populated(name)


def _spawn_error_text(spec: ComponentSpec, exc: BaseException) -> str:
    if isinstance(exc, SpawnError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        if exc.errno in (errno.ENOENT, errno.EACCES) and exc.filename:
            return f"{exc.filename}: {os.strerror(exc.errno)}"
        return f"{spec.command[0]}: {os.strerror(exc.errno)}"
    return f"{spec.command[0]}: {exc}"


def _scoped(scopes: Scopes, spec: ComponentSpec, creds: Credentials) -> list[str]:
    """The argv that starts `spec` in its systemd scope, switching user once it is in it."""
    if (creds.user, creds.group) != (None, None) and not scopes.setpriv:
        raise SpawnError("cannot switch user inside a systemd scope: setpriv is not installed")
    return scopes.command(spec, creds.user, creds.group, creds.extra_groups)
