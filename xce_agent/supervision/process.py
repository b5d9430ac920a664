"""Start, watch, signal and re-adopt component processes: the kernel side of supervision.

Each component runs in its own session and process group, so the whole group can be
signalled. Exits are noticed through a pidfd, which works for our children and for
processes we adopted after an agent restart (we are not their parent then, so their exit
status is unknown). Output goes into a named pipe in the state directory that both the
agent and the child hold open read-write: the child never gets EPIPE while the agent
restarts, and the next agent reads on from where the previous one stopped.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import grp
import logging
import os
import pwd
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from xce_agent.supervision.spec import ComponentSpec

log = logging.getLogger(__name__)

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# Variables that belong to the agent's own service and must not leak into components.
_PRIVATE_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID")


class SpawnError(Exception):
    """The component could not be started; the message says why in one line."""


@dataclass(frozen=True)
class ProcessIdentity:
    """What makes a pid the process we started, across agent restarts.

    `cmdline` is the configured command it was started with: a changed config does not
    adopt a process started from the old one.
    """

    pid: int
    create_time: float
    cmdline: tuple[str, ...]
    boot_id: str

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "create_time": self.create_time,
            "cmdline": list(self.cmdline),
            "boot_id": self.boot_id,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProcessIdentity | None:
        try:
            pid, created = data["pid"], data["create_time"]
            cmdline, boot = data["cmdline"], data["boot_id"]
        except KeyError:
            return None
        if not (isinstance(pid, int) and isinstance(created, (int, float))):
            return None
        if not (isinstance(cmdline, list) and isinstance(boot, str)):
            return None
        return cls(pid, float(created), tuple(str(x) for x in cmdline), boot)


@dataclass
class Handle:
    """A live component process: our child (`popen` set) or an adopted one."""

    identity: ProcessIdentity
    pidfd: int
    popen: subprocess.Popen[bytes] | None

    @property
    def pid(self) -> int:
        return self.identity.pid


@functools.lru_cache(maxsize=1)
def boot_id() -> str:
    """This boot's id; a pid recorded under another boot id is never adopted."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def identify(pid: int) -> ProcessIdentity | None:
    try:
        cmdline = tuple(psutil.Process(pid).cmdline())
    except (psutil.Error, OSError):
        return None
    created = create_time(pid)
    return ProcessIdentity(pid, created, cmdline, boot_id()) if created else None


@functools.lru_cache(maxsize=1)
def _boot_time() -> float:
    return psutil.boot_time()


def same_process(pid: int, started: float) -> bool:
    """`pid` is still the process that started at `started` (epoch seconds, as recorded)."""
    created = create_time(pid)
    return bool(created) and abs(created - started) <= 0.05


def create_time(pid: int) -> float:
    """When `pid` started, in epoch seconds (psutil's formula, with the boot time cached)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return _boot_time() + int(fields[19]) / _CLOCK_TICKS


# Every component carries these, so a restarted agent can find a process it started but
# crashed before recording (the one window where a pid could go unrecorded).
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


def _credentials(spec: ComponentSpec) -> Credentials:
    """The user, group and supplementary groups a component switches to, if any."""
    if spec.user is None and spec.group is None:
        return Credentials()
    if os.geteuid() != 0:
        wanted = spec.user or spec.group
        raise SpawnError(f"cannot switch to {wanted!r}: the agent does not run as root")
    gid: int | None = None
    if spec.group is not None:
        gid = int(spec.group) if spec.group.isdigit() else grp.getgrnam(spec.group).gr_gid
    if spec.user is None:
        return Credentials(group=gid)
    entry = _passwd(spec.user)
    gid = gid if gid is not None else entry.pw_gid
    return Credentials(entry.pw_uid, gid, os.getgrouplist(entry.pw_name, gid))


class OutputPipe:
    """The named pipe a component writes its stdout and stderr into."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.exists() and not stat.S_ISFIFO(path.lstat().st_mode):
            path.unlink()
        if not path.exists():
            os.mkfifo(path, 0o600)
        # Read-write keeps the pipe open with no writer, so reads never hit EOF.
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self._partial = b""

    def child_fd(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_CLOEXEC)

    def read_lines(self) -> list[str]:
        chunks = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not data:
                break
            chunks.append(data)
        buffer = self._partial + b"".join(chunks)
        *lines, self._partial = buffer.split(b"\n")
        if len(self._partial) > 65536:  # a runaway line without newline
            lines.append(self._partial)
            self._partial = b""
        return [line.decode("utf-8", "replace").rstrip("\r") for line in lines]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class ProcessRunner:
    """Real processes; tests of the agent wiring may substitute a fake with the same methods."""

    def __init__(self, base_env: Mapping[str, str] | None = None, owner: str = "") -> None:
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.owner = owner  # who started the process (the agent's state directory)
        self._envs: dict[str, dict[str, str]] = {}
        self._extra: dict[str, dict[str, str]] = {}
        self._fds: dict[str, tuple[int, ...]] = {}

    def set_extra_env(self, name: str, env: Mapping[str, str], fds: tuple[int, ...] = ()) -> None:
        """Variables (and descriptors) the owner adds for the next starts of `name`."""
        self._extra[name] = dict(env)
        self._fds[name] = fds
        self._envs.pop(name, None)

    def spawn(self, spec: ComponentSpec, output: OutputPipe | None) -> Handle:
        out = output.child_fd() if output else subprocess.DEVNULL
        try:
            creds = _credentials(spec)
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
            )
        except (OSError, KeyError, ValueError, SpawnError, subprocess.SubprocessError) as exc:
            raise SpawnError(_spawn_error_text(spec, exc)) from None
        finally:
            if output is not None and isinstance(out, int) and out >= 0:
                os.close(out)
        pidfd = os.pidfd_open(popen.pid)
        identity = ProcessIdentity(popen.pid, create_time(popen.pid), spec.command, boot_id())
        return Handle(identity, pidfd, popen)

    def _env(self, spec: ComponentSpec) -> dict[str, str]:
        env = self._envs.get(spec.name)
        if env is None:
            env = component_env(spec, self.base_env, self.owner)
            env.update(self._extra.get(spec.name, {}))
            self._envs[spec.name] = env
        return env

    def adopt(self, recorded: ProcessIdentity, spec: ComponentSpec) -> Handle | None:
        """A handle on the recorded process if it is still the same one, else None."""
        if recorded.boot_id != boot_id() or recorded.cmdline != spec.command:
            return None
        try:
            pidfd = os.pidfd_open(recorded.pid)
        except OSError:
            return None
        # pid + start time (+ boot id) names one process; the pidfd was opened before the
        # check, so a pid reused after it cannot slip in. The command line is not compared
        # with /proc: a script's interpreter or a process title would make it differ.
        if not same_process(recorded.pid, recorded.create_time):
            os.close(pidfd)
            return None
        return Handle(recorded, pidfd, None)

    def find_marked(self, spec: ComponentSpec) -> ProcessIdentity | None:
        """A running group leader this owner started for `spec`, found by its markers."""
        if not self.owner:
            return None
        for proc in psutil.process_iter(["pid"]):
            try:
                env = proc.environ()
                if env.get(MARK_COMPONENT) != spec.name or env.get(MARK_OWNER) != self.owner:
                    continue
                if os.getpgid(proc.pid) != proc.pid:
                    continue
                return ProcessIdentity(proc.pid, create_time(proc.pid), spec.command, boot_id())
            except (psutil.Error, OSError):
                continue
        return None

    def reap(self, handle: Handle) -> tuple[int | None, int | None]:
        """(exit code, killing signal) once the pidfd said it exited; unknown if adopted."""
        os.close(handle.pidfd)
        if handle.popen is None:
            return None, None
        returncode = handle.popen.wait()
        if returncode < 0:
            return None, -returncode
        return returncode, None

    def signal_group(self, pid: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)


def _spawn_error_text(spec: ComponentSpec, exc: BaseException) -> str:
    if isinstance(exc, SpawnError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        if exc.errno in (errno.ENOENT, errno.EACCES) and exc.filename:
            return f"{exc.filename}: {os.strerror(exc.errno)}"
        return f"{spec.command[0]}: {os.strerror(exc.errno)}"
    return f"{spec.command[0]}: {exc}"
