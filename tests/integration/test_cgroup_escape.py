"""A component's process that moves itself out of the component's cgroup (a write to another
cgroup's cgroup.procs, which a component running as root may make) still goes with the
component: a stop leaves none of it, and a restart never runs beside the one that escaped.

Every agent runs inside a cgroup the test made; the escaped process sits in a sibling of the
agent's cgroup, so the test can count it from cgroup.procs.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration import never_two as nt
from tests.integration.helpers import alive, wait_for
from tests.integration.test_never_two import SandboxedAgent

ROOT = nt.usable_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="needs root and a writable cgroup v2")

# A daemon that escapes: the main process forks a child, which moves itself into the cgroup
# $ESCAPE_DIR and starts its own session; the main process then waits.
ESCAPER = """\
import os, sys, time
out = os.environ["ESCAPE_DIR"]
if os.fork() == 0:
    with open(os.path.join(out, "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))
    os.setsid()
    time.sleep(600)
    os._exit(0)
time.sleep(600)
"""


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Path]:
    assert ROOT is not None
    path = ROOT / f"xce-escape-{os.getpid()}-{tmp_path.name}"
    path.mkdir()
    yield path
    nt.remove_tree(path)


def _host(tmp_path: Path, sandbox: Path, program: str, environment: str) -> SandboxedAgent:
    """An agent in the sandbox's `unit` cgroup, its worker running `program` (restarted at
    once) with `environment` (YAML flow mapping entries)."""
    unit = sandbox / "unit"
    unit.mkdir()
    host = SandboxedAgent(tmp_path, unit, {"XCE_AGENT_CGROUP": str(unit)})
    extra = f"stop_timeout: 2s\nenvironment: {{{environment}}}\n"
    host.write({"worker": (program, extra + "restart: {policy: always, delay: 0}")})
    return host


@dataclass(frozen=True)
class Escaped:
    host: SandboxedAgent
    elsewhere: Path  # the cgroup the worker's child moved itself into
    pid: int  # that child


@pytest.fixture
def escaped(sandbox: Path, tmp_path: Path) -> Iterator[Escaped]:
    """A running agent whose worker's child has escaped into a sibling cgroup."""
    elsewhere = sandbox / "elsewhere"
    elsewhere.mkdir()
    host = _host(tmp_path, sandbox, ESCAPER, f"ESCAPE_DIR: {elsewhere}")
    try:
        host.start()
        wait_for(lambda: host.running_pid("worker"))
        wait_for(lambda: nt.procs(elsewhere), 10)
        [pid] = nt.procs(elsewhere)
        yield Escaped(host, elsewhere, pid)
    finally:
        host.close()


def test_a_stop_kills_what_escaped_the_component_cgroup(escaped: Escaped) -> None:
    stop = escaped.host.cli("stop", "--timeout", "20")
    assert stop.returncode == 0, stop.stderr
    assert not alive(escaped.pid), "a process of the stopped worker runs on"


def test_a_restart_never_runs_beside_what_escaped(escaped: Escaped) -> None:
    host, elsewhere = escaped.host, escaped.elsewhere
    first = host.running_pid("worker")
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: host.running_pid("worker") not in (None, first), 20)
    wait_for(lambda: escaped.pid not in nt.procs(elsewhere) or len(nt.procs(elsewhere)) > 1, 10)
    beside = nt.procs(elsewhere)
    assert not alive(escaped.pid), f"the old worker's process runs beside the new: {beside}"


# A component (as root) that moves the agent into its own cgroup, then exits.
CAPTOR = """\
import os, time
mine = open("/proc/self/cgroup").read().split("::", 1)[1].strip()
with open(os.environ["CGROUP_MOUNT"] + mine + "/cgroup.procs", "w") as procs:
    procs.write(str(os.getppid()))
time.sleep(0.5)
raise SystemExit(1)
"""


def test_a_component_that_moves_the_agent_into_its_cgroup_does_not_kill_it(
    sandbox: Path, tmp_path: Path
) -> None:
    unit = sandbox / "unit"
    host = _host(tmp_path, sandbox, CAPTOR, f"CGROUP_MOUNT: {ROOT}")
    try:
        host.start()
        agent = host.proc
        assert agent is not None
        wait_for(lambda: host.log().count("starting -> running") >= 3 or agent.poll(), 20)
        assert agent.poll() is None, "the agent was killed with its component's cgroup"
        # Back in its own leaf: not at every moment, since each new captor moves it again
        # once started, until the agent moves back before the kill at its exit.
        wait_for(lambda: agent.pid in nt.procs(unit / "agent"), 10)
    finally:
        host.close()


def test_a_stop_without_an_agent_kills_what_escaped(escaped: Escaped) -> None:
    """`systemctl stop xce-agent` leaves the components running; `xce-agent stop` then
    stops them itself, and what escaped their cgroups with them."""
    escaped.host.detach()
    stop = escaped.host.cli("stop", "--timeout", "20")
    assert stop.returncode == 0, stop.stderr
    assert "no agent was running" in stop.stdout
    assert not alive(escaped.pid), "a process of the stopped worker runs on"
