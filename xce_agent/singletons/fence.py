"""The fence of a singleton component: runs it, and stops it when its lease deadline passes.

`python3 -m xce_agent.singletons.fence --stop-signal N --stop-timeout S -- COMMAND...` is what
the agent starts for a singleton component. It reads `TOKEN DEADLINE` lines (DEADLINE on the
system's monotonic clock) from the pipe named by XCE_AGENT_LEASE_FD, starts COMMAND with
XCE_LEASE_TOKEN and XCE_LEASE_NAME once it has one, and extends the deadline with every
later line. If the deadline passes (the agent was killed, stopped or cut off and could not
renew in time), it sends the stop signal to the component's process group, and SIGKILL once
the stop timeout is over. So the component is dead before its lease can expire at the
controller even when the agent is not there to stop it. Where the agent started it in a cgroup
of its own (cgroup containment), the fence stops that whole cgroup the same way: a process that
left the group with setsid() is still the component's and dies with it. The component dies
with the fence too (PR_SET_PDEATHSIG): killing the fence does not unfence it.

Otherwise it stays out of the way: the stop signal the supervisor sends to the group reaches
the component directly, and the fence exits as the component did.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from xce_agent.supervision.cgroups import cgroup2_mount

FD_ENV = "XCE_AGENT_LEASE_FD"
NAME_ENV = "XCE_AGENT_LEASE_NAME"
AGENT_ENV = "XCE_AGENT_LEASE_AGENT"  # the agent's pid: whose cgroup is not the component's
TOKEN_ENV = "XCE_LEASE_TOKEN"  # noqa: S105 - a variable name
LEASE_ENV = "XCE_LEASE_NAME"
FIRST_LINE_WAIT = 5.0  # the agent writes the deadline when it starts the fence
EX_TEMPFAIL = 75
PR_SET_PDEATHSIG = 1


def line(token: int, deadline: float) -> bytes:
    return f"{token} {deadline:.6f}\n".encode()


class Deadlines:
    """The lines of the lease pipe: the latest deadline of the first token seen."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        self.token = 0
        self.deadline = 0.0
        self._partial = b""
        os.set_blocking(fd, False)

    def read(self) -> None:
        """Take what the pipe holds; on end of file stop watching it (keep the deadline)."""
        while self.fd is not None:
            try:
                chunk = os.read(self.fd, 4096)
            except BlockingIOError:
                return
            if not chunk:
                os.close(self.fd)
                self.fd = None
                return
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            for text in lines:
                self._take(text)

    def _take(self, text: bytes) -> None:
        try:
            token_text, deadline_text = text.split()
            token, deadline = int(token_text), float(deadline_text)
        except ValueError:
            return
        if self.token == 0:
            self.token = token
        if token == self.token:
            self.deadline = max(self.deadline, deadline)


def say(message: str) -> None:
    print(f"xce-agent fence: {message}", file=sys.stderr, flush=True)


def wait_first(deadlines: Deadlines, limit: float) -> bool:
    end = time.monotonic() + limit
    while deadlines.token == 0 and deadlines.fd is not None:
        left = end - time.monotonic()
        if left <= 0:
            return False
        select.select([deadlines.fd], [], [], left)
        deadlines.read()
    return deadlines.token != 0


def own_cgroup(agent: str) -> Path | None:
    """The component's own cgroup: this process's, if the agent that started it is in another
    one (cgroup containment put the fence in the component's cgroup); else None."""
    try:
        if os.getppid() != int(agent):
            return None  # the agent is gone already: nothing says which cgroup is whose
        mine = _cgroup_path(Path("/proc/self/cgroup").read_text())
        theirs = _cgroup_path(Path(f"/proc/{agent}/cgroup").read_text())
    except (OSError, ValueError):
        return None
    mount = cgroup2_mount()
    if mine is None or theirs is None or mine == theirs or mount is None:
        return None
    return mount / mine.strip("/")


def _cgroup_path(proc_cgroup: str) -> str | None:
    for entry in proc_cgroup.splitlines():
        if entry.startswith("0::"):
            return entry[3:]
    return None


def _others(cgroup: Path) -> list[int]:
    try:
        pids = [int(x) for x in (cgroup / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []
    return [pid for pid in pids if pid != os.getpid()]


def _signal_others(cgroup: Path, signum: int) -> None:
    for pid in _others(cgroup):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _kill_cgroup(cgroup: Path) -> None:
    """SIGKILL everything in it: cgroup.kill (which ends this process too), or, without it
    (an older kernel, a component not run as root), each member but this one until none is left."""
    with contextlib.suppress(OSError):
        (cgroup / "cgroup.kill").write_text("1")
    for _ in range(100):
        if not _others(cgroup):
            return
        _signal_others(cgroup, signal.SIGKILL)
        time.sleep(0.001)


def enforce(
    child: subprocess.Popen[bytes],
    stop_signal: int,
    stop_timeout: float,
    cgroup: Path | None = None,
) -> int:
    """Stop the whole group (and the component's cgroup): the stop signal, then SIGKILL
    (which ends this process too)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(0, stop_signal)
    if cgroup is not None:
        _signal_others(cgroup, stop_signal)
    end = time.monotonic() + stop_timeout
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=stop_timeout)
    while cgroup is not None and _others(cgroup) and time.monotonic() < end:
        time.sleep(0.01)  # what left the group has its stop timeout too
    if cgroup is not None:
        _kill_cgroup(cgroup)
    os.killpg(0, signal.SIGKILL)  # leftovers of the component too; the fence goes with them
    return EX_TEMPFAIL  # not reached


def supervise(
    child: subprocess.Popen[bytes],
    deadlines: Deadlines,
    stop_signal: int,
    stop_timeout: float,
    cgroup: Path | None = None,
) -> int:
    pidfd = os.pidfd_open(child.pid)
    while True:
        left = deadlines.deadline - time.monotonic()
        if left <= 0:
            say(f"lease not renewed by its deadline: stopping (token {deadlines.token})")
            return enforce(child, stop_signal, stop_timeout, cgroup)
        watched = [pidfd] + ([deadlines.fd] if deadlines.fd is not None else [])
        ready, _, _ = select.select(watched, [], [], left)
        if pidfd in ready:
            return _mirror(child.wait())
        if deadlines.fd is not None and deadlines.fd in ready:
            deadlines.read()


def _dies_with(fence: int) -> Callable[[], None] | None:
    """What the component runs before its exec: it is killed if the fence is (kill -9, the
    OOM killer), so a fence that is gone while the agent is stopped does not leave the
    component running past its deadline. Runs between fork and exec: C calls only."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != fence:  # the fence died before the call took effect
            os._exit(EX_TEMPFAIL)

    return preexec


def _mirror(status: int) -> int:
    """Exit as the component did: its code, or its signal."""
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        return 128 - status
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="xce-agent-fence")
    parser.add_argument("--stop-signal", type=int, default=int(signal.SIGTERM))
    parser.add_argument("--stop-timeout", type=float, default=10.0)
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    try:
        fd = int(os.environ.pop(FD_ENV))
    except (KeyError, ValueError):
        say(f"{FD_ENV} names no lease pipe: not starting")
        return EX_TEMPFAIL
    lease = os.environ.pop(NAME_ENV, "")
    cgroup = own_cgroup(os.environ.pop(AGENT_ENV, ""))
    deadlines = Deadlines(fd)
    if not wait_first(deadlines, FIRST_LINE_WAIT):
        say("no lease deadline from the agent: not starting")
        return EX_TEMPFAIL
    if deadlines.deadline <= time.monotonic():
        say(f"lease deadline (token {deadlines.token}) already passed: not starting")
        return EX_TEMPFAIL
    # The supervisor's stop signal reaches the component through the group; the fence waits
    # for it to exit. A caught signal is reset to the default in the component by exec.
    for signum in {args.stop_signal, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}:
        signal.signal(signum, lambda *_: None)
    env = {**os.environ, TOKEN_ENV: str(deadlines.token), LEASE_ENV: lease}
    dies_with_fence = _dies_with(os.getpid())
    try:
        # One thread here, and the hook makes C calls only.
        child = subprocess.Popen(args.command, env=env, preexec_fn=dies_with_fence)  # noqa: PLW1509
    except OSError as exc:
        say(f"cannot start {args.command[0]}: {exc.strerror}")
        return 127
    return supervise(child, deadlines, args.stop_signal, args.stop_timeout, cgroup)


if __name__ == "__main__":
    sys.exit(main())
