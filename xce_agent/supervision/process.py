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

from xce_agent.supervision.boot import boot_id
from xce_agent.supervision.cgroups import CgroupTree
from xce_agent.supervision.identity import (
    ProcessIdentity,
    current,
    executable,
    mismatch,
    observe,
    spec_digest,
)
from xce_agent.supervision.output import OutputPipe
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


def component_env(spec: ComponentSpec, base: Mapping[str, str], owner: str = "") -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in _PRIVATE_ENV}
    env[MARK_COMPONENT] = spec.name
    if owner:
        env[MARK_OWNER] = owner
    if spec.user is not None:
        entry = _passwd(spec.user)
        env.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)
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

    def extra_env(self, name: str) -> dict[str, str]:
        return dict(self._extra.get(name, {}))

    def forget_env(self, name: str) -> None:
        self._envs.pop(name, None)

    def spawn(self, spec: ComponentSpec, output: OutputPipe | None) -> Handle:
        out = output.child_fd() if output else subprocess.DEVNULL
        procs = -1
        try:
            creds = credentials(spec.user, spec.group)
            if self.cgroups is not None:
                procs = self.cgroups.open_procs(spec.name, spec.limits)
            popen = subprocess.Popen(
                list(spec.command),
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
        cgroup = self.cgroups.relative(spec.name) if self.cgroups else ""
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
        if why and self._vouched(recorded, spec.name):
            # Exact pid and start time, in the component's cgroup (only the agent puts a
            # process there): ours, exec'd since the last save of an agent killed -9.
            why, recorded = "", current(recorded)
        if why:
            os.close(pidfd)
            return Adoption(None, gone=why)
        if self.cgroups is not None and not self.cgroups.contains(spec.name, recorded.pid):
            if recorded.cgroup:
                os.close(pidfd)
                return Adoption(None, gone="not in the component's cgroup")
            # Started before the agent had a delegated cgroup (an upgrade): move it in.
            self.cgroups.move(spec.name, recorded.pid)
            recorded = replace(recorded, cgroup=self.cgroups.relative(spec.name))
        handle = Handle(recorded, pidfd, None)
        changed = (
            recorded.digest != digest_of(spec)
            if recorded.digest
            else recorded.command != spec.command
        )
        if changed:
            return Adoption(handle, replace="its configured command or settings changed")
        return Adoption(handle)

    def _vouched(self, recorded: ProcessIdentity, name: str) -> bool:
        if self.cgroups is None or not recorded.cgroup or mismatch(recorded, program=False):
            return False
        if not executable(recorded.pid):  # a zombie: gone, whatever its cgroup says
            return False
        return recorded.cgroup == self.cgroups.relative(name) and self.cgroups.contains(
            name, recorded.pid
        )

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
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)

    def kill_leftovers(self, name: str) -> int:
        """SIGKILL whatever is still in the component's cgroup; how many there were."""
        if self.cgroups is None or not self.cgroups.populated(name):
            return 0
        count = len(self.cgroups.pids(name))
        self.cgroups.kill(name)
        return count

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
