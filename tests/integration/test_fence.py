"""The fence of a singleton component as a real process: it stops the component by itself."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import alive, group_members, wait_for
from xce_agent.singletons import fence
from xce_agent.supervision.cgroups import cgroup2_mount

# The component: records its environment and open descriptors, starts a grandchild in its
# group, then runs until signalled (optionally ignoring SIGTERM).
COMPONENT = """
import json, os, signal, subprocess, sys, time
out = sys.argv[1]
if len(sys.argv) > 2:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
kid = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
seen = {"token": os.environ.get("XCE_LEASE_TOKEN"), "lease": os.environ.get("XCE_LEASE_NAME"),
        "fd_env": os.environ.get("XCE_AGENT_LEASE_FD"), "fds": sorted(os.listdir("/proc/self/fd")),
        "pid": os.getpid(), "kid": kid.pid}
with open(out + ".tmp", "w") as f:
    json.dump(seen, f)
os.rename(out + ".tmp", out)
while True:
    time.sleep(0.05)
"""


class Fenced:
    def __init__(self, tmp: Path, stop_timeout: float = 0.5, ignore_term: bool = False) -> None:
        self.out = tmp / "seen.json"
        script = tmp / "component.py"
        script.write_text(COMPONENT)
        self.read, self.write = os.pipe()
        env = {**os.environ, fence.FD_ENV: str(self.read), fence.NAME_ENV: "prov"}
        command = [sys.executable, "-m", "xce_agent.singletons.fence", "--stop-signal", "15"]
        command += ["--stop-timeout", str(stop_timeout), "--", sys.executable, str(script)]
        command += [str(self.out)] + (["ignore"] if ignore_term else [])
        self.proc = subprocess.Popen(
            command, env=env, pass_fds=(self.read,), start_new_session=True
        )
        os.close(self.read)

    def send(self, token: int, deadline: float) -> None:
        os.write(self.write, fence.line(token, deadline))

    def seen(self) -> dict[str, object]:
        wait_for(self.out.exists, 20)
        data: dict[str, object] = json.loads(self.out.read_text())
        return data

    def close(self) -> None:
        if self.write >= 0:
            os.close(self.write)
            self.write = -1

    def end(self) -> None:
        self.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def fenced(tmp_path: Path) -> Iterator[Fenced]:
    f = Fenced(tmp_path)
    yield f
    f.end()


def test_stops_the_component_at_the_deadline_without_the_agent(fenced: Fenced) -> None:
    deadline = time.monotonic() + 1.5
    fenced.send(7, deadline)
    seen = fenced.seen()
    assert seen["token"] == "7" and seen["lease"] == "prov" and seen["fd_env"] is None
    assert len(seen["fds"]) <= 4  # type: ignore[arg-type]  # 0-2 and the listing itself
    assert group_members(fenced.proc.pid)
    fenced.close()  # the agent is gone: end of file, the deadline stays
    fenced.proc.wait(timeout=20)
    assert time.monotonic() >= deadline  # not before
    assert not group_members(fenced.proc.pid)  # the grandchild too


def test_extensions_keep_it_running_and_the_last_one_counts(fenced: Fenced) -> None:
    start = time.monotonic()
    fenced.send(3, start + 1.0)
    fenced.seen()
    for i in range(1, 6):
        fenced.send(3, start + 1.0 + 0.5 * i)
        fenced.send(99, start + 600)  # another token's line never extends this hold
        time.sleep(0.4)
    assert fenced.proc.poll() is None
    fenced.proc.wait(timeout=20)
    assert time.monotonic() - start >= 3.4  # not before the last deadline (start + 3.5)


def test_sigkill_after_the_stop_timeout_for_a_component_ignoring_sigterm(tmp_path: Path) -> None:
    f = Fenced(tmp_path, stop_timeout=0.5, ignore_term=True)
    try:
        f.send(1, time.monotonic() + 1.0)
        seen = f.seen()
        started = time.monotonic()
        f.proc.wait(timeout=20)
        assert f.proc.returncode == -signal.SIGKILL
        assert time.monotonic() - started >= 0.4
        wait_for(lambda: not group_members(f.proc.pid), 5)
        assert seen["kid"] not in group_members(f.proc.pid)
    finally:
        f.end()


def test_a_stop_from_the_supervisor_passes_through(fenced: Fenced) -> None:
    fenced.send(1, time.monotonic() + 60)
    fenced.seen()
    os.killpg(fenced.proc.pid, signal.SIGTERM)
    fenced.proc.wait(timeout=20)
    assert fenced.proc.returncode == -signal.SIGTERM  # as the component exited


def test_no_deadline_or_a_passed_one_starts_nothing(tmp_path: Path) -> None:
    f = Fenced(tmp_path)
    try:
        f.send(1, time.monotonic() - 1)
        assert f.proc.wait(timeout=20) == fence.EX_TEMPFAIL
        assert not f.out.exists()
    finally:
        f.end()
    g = Fenced(tmp_path)
    try:
        g.close()  # end of file before any line
        assert g.proc.wait(timeout=20) == fence.EX_TEMPFAIL
        assert not g.out.exists()
    finally:
        g.end()


def _cgroup_root() -> Path | None:
    mount = cgroup2_mount()
    if mount is None or os.geteuid() != 0 or not os.access(mount, os.W_OK):
        return None
    return mount


# A component that double-forks a daemon out of its process group (setsid), as a careless or
# hostile singleton would; the daemon keeps working for the old holder unless it is stopped.
ESCAPER = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1] + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        while True:
            time.sleep(0.05)
    os._exit(0)
while True:
    time.sleep(0.05)
"""


@pytest.mark.skipif(_cgroup_root() is None, reason="needs root and a writable cgroup v2")
def test_in_the_components_cgroup_what_left_the_group_is_stopped_too(tmp_path: Path) -> None:
    root = _cgroup_root()
    assert root is not None
    leaf = root / f"xce-test-fence-{os.getpid()}-{tmp_path.name}"
    leaf.mkdir()
    script, pid_file = tmp_path / "escaper.py", tmp_path / "daemon.pid"
    script.write_text(ESCAPER)
    read, write = os.pipe()
    # As the agent starts it under cgroup containment: in the component's cgroup, not the
    # agent's (this test's), with the agent's pid to tell the two apart.
    procs = os.open(leaf / "cgroup.procs", os.O_WRONLY)
    env = {**os.environ, fence.FD_ENV: str(read), fence.AGENT_ENV: str(os.getpid())}
    command = [sys.executable, "-m", "xce_agent.singletons.fence", "--stop-signal", "15"]
    command += ["--stop-timeout", "0.5", "--", sys.executable, str(script), str(pid_file)]
    proc = subprocess.Popen(
        command,
        env=env,
        pass_fds=(read,),
        start_new_session=True,
        preexec_fn=functools.partial(os.write, procs, b"0"),  # noqa: PLW1509 - one C call
    )
    os.close(procs)
    os.close(read)
    daemon = 0
    try:
        deadline = time.monotonic() + 1.5
        os.write(write, fence.line(1, deadline))
        wait_for(pid_file.exists, 20)
        daemon = int(pid_file.read_text())
        assert os.getpgid(daemon) != proc.pid  # out of the fence's group
        os.close(write)  # the agent is gone: the deadline stays
        write = -1
        proc.wait(timeout=20)
        assert time.monotonic() >= deadline
        wait_for(lambda: not alive(daemon), 5)
        assert not (leaf / "cgroup.procs").read_text().split()
    finally:
        if write >= 0:
            os.close(write)
        with contextlib.suppress(OSError):
            (leaf / "cgroup.kill").write_text("1")
        wait_for(lambda: not (leaf / "cgroup.procs").read_text().split(), 5)
        leaf.rmdir()


def test_a_killed_fence_takes_its_component_with_it(fenced: Fenced) -> None:
    # The agent stopped (no one to stop the component) and the fence killed (kill -9, the
    # OOM killer): the component must not run on past its deadline.
    fenced.send(1, time.monotonic() + 600)
    seen = fenced.seen()
    component = int(seen["pid"])  # type: ignore[call-overload]
    assert alive(component)
    os.kill(fenced.proc.pid, signal.SIGKILL)
    fenced.proc.wait(timeout=20)
    wait_for(lambda: not alive(component), 5)
