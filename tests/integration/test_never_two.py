"""Never two copies of a component, with real agents and processes, in the two ways a real
host used to produce them (issue 21):

- containment on, the next agent started from another cgroup than its components (a
  `systemctl stop` leaves them running; `xce-agent run` from a root shell), or the agent's
  tree removed and made again while it was down: the live worker was "gone (in cgroup X,
  not in the component's cgroup)" and a second copy started beside it;
- without containment, the state directory read-only or full: a restart's new pid was never
  saved, and after a kill -9 of the agent the next one started a second copy.

Every agent runs inside a cgroup the test made, so copies are counted from cgroup.procs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration import never_two as nt
from tests.integration.helpers import alive, wait_for
from tests.integration.hostagent import AGENT, HostAgent

ROOT = nt.usable_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="needs root and a writable cgroup v2")
SLEEPER = "import time\ntime.sleep(600)\n"


class SandboxedAgent(HostAgent):
    """A HostAgent whose agent process starts inside `sandbox` (a cgroup the test owns)."""

    def __init__(self, tmp: Path, sandbox: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(tmp, env)
        self.sandbox = sandbox

    def start(self, wait: bool = True, **env: str) -> SandboxedAgent:
        run = [*AGENT, "run", "--config", str(self.config)]
        wrapper = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.sandbox)]
        with open(self.tmp / "agent.log", "ab") as log:
            self.proc = subprocess.Popen(
                [*wrapper, *run], stdout=log, stderr=subprocess.STDOUT, env={**self.env, **env}
            )
        if wait:
            pid = self.proc.pid
            wait_for(lambda: self.state().get("agent", {}).get("pid") == pid, 20)
        return self


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Path]:
    assert ROOT is not None
    path = ROOT / f"xce-never-two-{os.getpid()}-{tmp_path.name}"
    path.mkdir()
    yield path
    nt.remove_tree(path)


def wait_until(predicate: Callable[[], object], timeout: float) -> bool:
    """Whether `predicate` came true within `timeout` (for a check made later)."""
    try:
        wait_for(predicate, timeout)
    except AssertionError:
        return False
    return True


def _worker_copies(sandbox: Path, tmp: Path) -> list[int]:
    return nt.copies(sandbox, str(tmp / "worker.py"))


def test_an_agent_started_in_another_cgroup_adopts_the_worker_instead_of_a_second(
    sandbox: Path, tmp_path: Path
) -> None:
    first, second = sandbox / "unit-a", sandbox / "shell-b"
    for cg in (first, second):
        cg.mkdir()
    host = SandboxedAgent(tmp_path, first, {"XCE_AGENT_CGROUP": str(first)})
    host.write({"worker": (SLEEPER, "stop_timeout: 2s")})
    try:
        host.start()
        wait_for(lambda: host.running_pid("worker"))
        worker = host.running_pid("worker")
        assert worker in nt.procs(first / "component-worker")
        host.detach()  # `systemctl stop`: the agent goes, its worker stays
        # `xce-agent run` from a root shell: another cgroup, another tree.
        host.sandbox = second
        host.start(XCE_AGENT_CGROUP=str(second))
        wait_for(lambda: f"adopted running process {worker}" in host.log(), 10)
        assert "is gone" not in host.log()
        assert _worker_copies(sandbox, tmp_path) == [worker]
        assert worker in nt.procs(second / "component-worker")  # moved back under it
        assert host.running_pid("worker") == worker
        stop = host.cli("stop", "--timeout", "20")
        assert stop.returncode == 0, stop.stderr
        assert not alive(worker) and _worker_copies(sandbox, tmp_path) == []
    finally:
        host.close()


def test_a_worker_whose_cgroup_tree_was_removed_and_made_again_is_adopted(
    sandbox: Path, tmp_path: Path
) -> None:
    unit, elsewhere = sandbox / "unit", sandbox / "elsewhere"
    unit.mkdir()
    elsewhere.mkdir()
    host = SandboxedAgent(tmp_path, unit, {"XCE_AGENT_CGROUP": str(unit)})
    host.write({"worker": (SLEEPER, "stop_timeout: 2s")})
    try:
        host.start()
        wait_for(lambda: host.running_pid("worker"))
        worker = host.running_pid("worker")
        assert worker is not None
        host.detach()
        # While the agent is down its tree goes (the worker moved out first: a populated
        # cgroup cannot be removed), and is made again.
        nt.enter(elsewhere, worker)
        (unit / "component-worker").rmdir()
        (unit / "agent").rmdir()
        host.start()
        wait_for(lambda: f"adopted running process {worker}" in host.log(), 10)
        assert _worker_copies(sandbox, tmp_path) == [worker]
        assert worker in nt.procs(unit / "component-worker")
    finally:
        host.close()


@pytest.mark.skipif(not nt.can_mount(), reason="needs root and mount(8)")
@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_a_restart_whose_pid_cannot_be_saved_is_not_made(
    sandbox: Path, tmp_path: Path, fault: str
) -> None:
    """No containment (the agent's cgroup is not delegated); the state directory turns
    read-only or full, the worker crashes: it is not restarted until its record can be
    saved (state_unwritable), so a kill -9 of the agent and the next agent leave one copy."""
    metrics = tmp_path / "metrics.prom"
    host = SandboxedAgent(tmp_path, sandbox)
    host.write({"worker": (SLEEPER, "stop_timeout: 2s\nrestart: {policy: always}")})
    with open(host.config, "a") as config:
        config.write(f"metrics: {{textfile: {metrics}}}\n")
    mounted = False
    try:
        if fault == "full":
            nt.mount_small(host.state_dir)
            mounted = True
        host.start()
        wait_for(lambda: host.running_pid("worker"))
        worker = host.running_pid("worker")
        assert worker is not None and "process groups" in host.state()["containment"]
        if fault == "read-only":
            nt.mount_read_only(host.state_dir)
            mounted = True
        else:
            filler = nt.fill(host.state_dir)
        os.kill(worker, signal.SIGKILL)
        # The agent reacts: it defers the restart (now), or makes it unsaved (before).
        wait_for(lambda: "not started" in host.log() or _worker_copies(sandbox, tmp_path), 10)
        said = lambda: 'code="state_unwritable"' in metrics.read_text()  # noqa: E731
        told = wait_until(said, 5)
        unsaved = _worker_copies(sandbox, tmp_path)
        status = host.cli("status")
        shown = json.loads(host.cli("status", "--json").stdout or "{}")
        host.kill9()
        if fault == "read-only":
            nt.unmount(host.state_dir)
            mounted = False
        else:
            filler.unlink()
        host.start()
        wait_for(lambda: host.running_pid("worker") not in (None, worker))
        started = host.running_pid("worker")
        wait_for(lambda: started in _worker_copies(sandbox, tmp_path))
        assert _worker_copies(sandbox, tmp_path) == [started], f"unsaved restart {unsaved}"
        assert unsaved == []  # the restart was not made while its pid could not be saved
        assert told  # metrics said why, and status
        assert status.returncode == 0 and "state_unwritable: cannot save state" in status.stdout
        assert shown["stale"] and shown["state_unwritable"].startswith("state_unwritable")
        assert "worker: not started" in host.log()
    finally:
        host.close()
        if mounted:
            nt.unmount(host.state_dir)


@pytest.mark.skipif(not nt.can_mount(), reason="needs root and mount(8)")
def test_a_start_that_cannot_be_saved_is_retried_and_made_once_it_can(
    sandbox: Path, tmp_path: Path
) -> None:
    host = SandboxedAgent(tmp_path, sandbox)
    host.write({"worker": (SLEEPER, "stop_timeout: 2s\nrestart: {policy: always}")})
    host.start()
    try:
        wait_for(lambda: host.running_pid("worker"))
        worker = host.running_pid("worker")
        assert worker is not None
        nt.mount_read_only(host.state_dir)
        try:
            os.kill(worker, signal.SIGKILL)
            wait_for(lambda: host.log().count("worker: not started") >= 2, 10)  # retried
            assert _worker_copies(sandbox, tmp_path) == []
        finally:
            nt.unmount(host.state_dir)
        wait_for(lambda: host.running_pid("worker") not in (None, worker), 40)
        assert _worker_copies(sandbox, tmp_path) == [host.running_pid("worker")]
    finally:
        host.close()
