"""Containment by cgroup v2 with real processes, in a cgroup this test creates and owns.

The agent is pointed at it with XCE_AGENT_CGROUP, as systemd's delegation would (the
end-to-end test does that part under real systemd). Skipped where no writable cgroup v2
hierarchy exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.helpers import alive, wait_for
from tests.integration.hostagent import HostAgent, wait_alive
from xce_agent.supervision.cgroups import cgroup2_mount
from xce_agent.supervision.identity import mismatch, observe


def _usable_root() -> Path | None:
    mount = cgroup2_mount()
    if mount is None or os.geteuid() != 0 or not os.access(mount, os.W_OK):
        return None
    return mount


ROOT = _usable_root()
pytestmark = pytest.mark.skipif(ROOT is None, reason="needs root and a writable cgroup v2")


def double_forker(pid_file: Path) -> str:
    return (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        "time.sleep(600)\n"
    )


def worker_with_job(job_file: Path) -> str:
    return (
        "import subprocess, sys, time\n"
        "job = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " start_new_session=True)\n"
        f"open({str(job_file)!r}, 'w').write(str(job.pid))\n"
        "time.sleep(600)\n"
    )


def _remove_tree(path: Path) -> None:
    for child in sorted(path.rglob("*"), key=lambda p: -len(p.parts)):
        if child.is_dir():
            with contextlib.suppress(OSError):
                (child / "cgroup.kill").write_text("1")
            with contextlib.suppress(OSError):
                child.rmdir()
    with contextlib.suppress(OSError):
        (path / "cgroup.kill").write_text("1")
    with contextlib.suppress(OSError):
        path.rmdir()


@pytest.fixture
def cgroup(tmp_path: Path) -> Iterator[Path]:
    assert ROOT is not None
    path = ROOT / f"xce-test-{os.getpid()}-{tmp_path.name}"
    path.mkdir()
    yield path
    wait_for(lambda: not any((p / "cgroup.procs").read_text().strip() for p in [path]), 5)
    _remove_tree(path)


@pytest.fixture
def host(tmp_path: Path, cgroup: Path) -> Iterator[HostAgent]:
    agent = HostAgent(tmp_path, env={"XCE_AGENT_CGROUP": str(cgroup)})
    yield agent
    agent.close()


def members(leaf: Path) -> list[int]:
    try:
        return [int(x) for x in (leaf / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def test_a_double_forked_daemon_and_a_surviving_job_are_gone_after_stop(
    host: HostAgent, cgroup: Path, tmp_path: Path
) -> None:
    daemon_file, job_file = tmp_path / "daemon.pid", tmp_path / "job.pid"
    host.write(
        {
            "daemonizer": (double_forker(daemon_file), "stop_timeout: 2s"),
            "worker": (worker_with_job(job_file), "stop_timeout: 2s"),
        }
    )
    host.start()
    wait_for(lambda: host.running_pid("daemonizer") and host.running_pid("worker"))
    daemon, job = wait_alive(daemon_file), wait_alive(job_file)
    host.strays += [daemon, job]
    assert daemon in members(cgroup / "component-daemonizer")
    assert job in members(cgroup / "component-worker")
    assert host.proc is not None and host.proc.pid in members(cgroup / "agent")
    assert "cgroup" in host.cli("status").stdout
    stop = host.cli("stop", "--timeout", "30")
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip() == "xce-agent: components stopped, agent exited"
    assert not alive(daemon) and not alive(job)
    assert members(cgroup / "component-daemonizer") == []
    assert members(cgroup / "component-worker") == []


def test_adoption_needs_the_cgroup_and_a_leftover_job_is_killed_before_the_next_start(
    host: HostAgent, cgroup: Path, tmp_path: Path
) -> None:
    job_file = tmp_path / "job.pid"
    host.write({"worker": (worker_with_job(job_file), "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    job = wait_alive(job_file)
    host.strays.append(job)
    host.detach()
    host.start()  # adopted: its identity and its cgroup match
    wait_for(lambda: host.state().get("lifecycle") == "running")
    assert host.running_pid("worker") == worker and alive(job)
    assert host.component("worker")["identity"]["cgroup"] == "component-worker"
    # The agent and the worker die; the job stays in the worker's cgroup.
    host.kill9()
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: not alive(worker))
    job_file.unlink()
    host.start()
    wait_for(lambda: host.running_pid("worker") not in (None, worker))
    wait_for(lambda: not alive(job))
    assert "leftover processes in its cgroup" in host.log()
    new_job = wait_alive(job_file)
    host.strays.append(new_job)
    # The worker crashes: its job goes with it, before the restart.
    new = host.running_pid("worker")
    assert new is not None
    os.kill(new, signal.SIGKILL)
    wait_for(lambda: not alive(new_job))
    wait_for(lambda: host.running_pid("worker") not in (None, new))


def test_a_twin_outside_the_cgroup_is_not_adopted(
    host: HostAgent, cgroup: Path, tmp_path: Path
) -> None:
    script = "import time\ntime.sleep(600)\n"
    host.write({"worker": (script, "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    host.detach()
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: not alive(worker))
    # Same executable, same command line, its exact start time forged into the state:
    # only the cgroup tells it apart.
    twin = subprocess.Popen([sys.executable, str(tmp_path / "worker.py")])
    host.strays.append(twin.pid)
    ticks = int(Path(f"/proc/{twin.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    import json

    state = host.state()
    record = state["components"][0]
    record["identity"].update(pid=twin.pid, start_ticks=ticks)
    record["pid"] = twin.pid
    (host.state_dir / "state.json").write_text(json.dumps(state))
    host.start()
    wait_for(lambda: host.running_pid("worker") not in (None, twin.pid))
    assert "not in the component's cgroup" in host.log()
    assert alive(twin.pid)
    twin.kill()
    twin.wait()


SILENT_EXEC = (
    "import os, sys, time\ntime.sleep(0.3)\n"
    "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)'])\n"
)


def test_a_component_that_exec_d_since_the_last_save_is_adopted_by_its_cgroup(
    host: HostAgent, cgroup: Path
) -> None:
    """Killed with SIGKILL, the agent has only its last save, from before the exec: the
    process in the component's cgroup with its exact pid and start time is still ours, and
    used to be killed and restarted as a leftover."""
    host.write({"worker": (SILENT_EXEC, "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    assert worker is not None
    host.strays.append(worker)
    wait_for(lambda: "import time" in Path(f"/proc/{worker}/cmdline").read_text())
    recorded = host.component("worker")["identity"]["cmdline"]
    assert "import time" not in " ".join(recorded)  # the record predates the exec
    host.kill9()
    host.start()
    wait_for(lambda: f"adopted running process {worker}" in host.log(), 10)
    assert host.running_pid("worker") == worker and alive(worker)
    assert "leftover" not in host.log()
    assert host.cli("stop", "--timeout", "20").returncode == 0
    assert not alive(worker)


@pytest.mark.parametrize("forged_cgroup", ["", "component-worker"])
def test_a_state_forged_with_an_unrelated_process_s_exact_identity_is_not_adopted(
    host: HostAgent, cgroup: Path, tmp_path: Path, forged_cgroup: str
) -> None:
    """Root forges state.json with the exact identity of a live process the agent never
    started (same program, pid, start ticks, boot, exe, command line, digest). With no
    recorded cgroup it used to be moved into the component's cgroup and adopted; sitting
    in a foreign cgroup that merely ends in component-worker, it used to pass as inside."""
    assert ROOT is not None
    host.write({"worker": ("import time\ntime.sleep(600)\n", "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    own = host.running_pid("worker")
    recorded = host.component("worker")["identity"]
    host.detach()
    assert own is not None
    os.kill(own, signal.SIGKILL)
    wait_for(lambda: not alive(own))

    foreign = ROOT / f"xce-foreign-{os.getpid()}-{tmp_path.name}"
    (foreign / "component-worker").mkdir(parents=True)
    try:
        # Its own session: an agent that took it for the worker signals its group only.
        stranger = subprocess.Popen(
            [sys.executable, str(tmp_path / "worker.py")], start_new_session=True
        )
        host.strays.append(stranger.pid)
        if forged_cgroup:
            (foreign / "component-worker" / "cgroup.procs").write_text(str(stranger.pid))
        before = Path(f"/proc/{stranger.pid}/cgroup").read_text()
        wait_for(lambda: "worker.py" in Path(f"/proc/{stranger.pid}/cmdline").read_text())
        forged = observe(stranger.pid, tuple(recorded["command"]), recorded["digest"])
        identity = {**forged.to_json(), "cgroup": forged_cgroup}
        assert mismatch(forged) == ""  # exact: every recorded field matches the live process
        state = host.state()
        state["components"][0].update(identity=identity, pid=stranger.pid, phase="running")
        (host.state_dir / "state.json").write_text(json.dumps(state))

        host.start()
        wait_for(lambda: host.running_pid("worker") not in (None, stranger.pid))
        said = f"worker: recorded process {stranger.pid} is gone (in cgroup"
        assert said in host.log()  # the forged record was read, and judged
        assert "not in the component's cgroup" in host.log()
        assert f"adopted running process {stranger.pid}" not in host.log()
        assert alive(stranger.pid)
        assert Path(f"/proc/{stranger.pid}/cgroup").read_text() == before  # never moved
        worker = host.running_pid("worker")
        assert worker is not None and worker in members(cgroup / "component-worker")

        # The agent still works: stop takes its own worker down, and nothing else.
        stop = host.cli("stop", "--timeout", "30")
        assert stop.returncode == 0, stop.stderr
        assert not alive(worker) and alive(stranger.pid)
    finally:
        with contextlib.suppress(NameError):
            stranger.kill()
            stranger.wait()
        _remove_tree(foreign)


def test_limits_without_their_controller_are_said_to_be_not_enforced(
    host: HostAgent, cgroup: Path
) -> None:
    """A cgroup without the memory and pids controllers (this project's CI machine binds them
    to cgroup v1): the limits cannot be enforced, and status says which."""
    host.write({"worker": ("import time\ntime.sleep(600)\n", "limits: {memory_max: 64M}")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    status = host.cli("status").stdout
    controllers = (cgroup / "cgroup.controllers").read_text().split()
    if "memory" in controllers:
        assert f"limits: enforced in {cgroup / 'component-worker'}" in status
        assert (cgroup / "component-worker" / "memory.max").read_text() == f"{64 * 1024**2}\n"
    else:
        assert f"limits: memory_max NOT enforced (no such controller in {cgroup})" in status
    assert host.cli("stop", "--timeout", "20").returncode == 0


def test_a_record_named_out_of_the_agent_s_cgroup_kills_nothing_there(
    host: HostAgent, cgroup: Path, tmp_path: Path
) -> None:
    """A forged record named `worker/../../VICTIM` resolves, through the worker's leaf, to a
    cgroup beside the agent's: `xce-agent stop` killed what ran there, and the agent exited 1
    at each start (it could not create that component's output pipe)."""
    assert ROOT is not None
    host.write({"worker": ("import time\ntime.sleep(600)\n", "stop_timeout: 2s")})
    host.start()
    wait_for(lambda: host.running_pid("worker"))
    worker = host.running_pid("worker")
    host.detach()
    victim_cgroup = ROOT / f"xce-victim-{os.getpid()}-{tmp_path.name}"
    victim_cgroup.mkdir()
    victim = subprocess.Popen(["sleep", "600"])
    try:
        (victim_cgroup / "cgroup.procs").write_text(str(victim.pid))
        forged_name = f"worker/../../{victim_cgroup.name}"
        assert (cgroup / f"component-{forged_name}").resolve() == victim_cgroup

        def forge() -> None:
            state = host.state()
            forged = {**state["components"][0], "name": forged_name, "identity": None}
            state["components"].append({**forged, "pid": None, "phase": "stopped"})
            (host.state_dir / "state.json").write_text(json.dumps(state))

        forge()
        host.start()
        wait_for(lambda: host.state().get("lifecycle") == "running")
        assert "ignored a component record with an invalid name" in host.log()  # read
        assert host.proc is not None and host.proc.poll() is None
        assert host.running_pid("worker") == worker  # adopted as before
        host.detach()
        forge()
        stop = host.cli("stop", "--timeout", "30")  # without an agent: from the state alone
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout.strip() == "xce-agent: no agent was running; stopped worker"
        assert worker is not None and not alive(worker)
        assert victim.poll() is None and members(victim_cgroup) == [victim.pid]
    finally:
        victim.kill()
        victim.wait()
        _remove_tree(victim_cgroup)
