"""End to end under real systemd: components contained in their own cgroups.

A host boots the .deb with a pure cgroup v2 hierarchy (what the .deb's targets have) and a
config with two components: one that double-forks a daemon, and a worker that starts a job
in its own session. A restart of the agent's unit keeps the worker and its job (adopted by
identity and cgroup); `xce-agent stop` then leaves nothing of either.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.machines import Machine, boot_marks, files_user_data

pytestmark = boot_marks()

DAEMONIZER = """\
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open('/run/xce-daemon.pid', 'w').write(str(os.getpid()))
        time.sleep(3600)
    os._exit(0)
time.sleep(3600)
"""
WORKER = """\
import signal, subprocess, sys, time
job = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'],
                       start_new_session=True)
open('/run/xce-job.pid', 'w').write(str(job.pid))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exits, leaving its job behind
time.sleep(3600)
"""
CONFIG = """\
version: 1
instance: {id: auto}
roles:
  worker:
    components:
      xce-worker:
        command: [/usr/bin/python3, /etc/xce/worker.py]
        stop_timeout: 5s
  provisioner:
    components:
      daemonizer:
        command: [/usr/bin/python3, /etc/xce/daemonizer.py]
        stop_timeout: 5s
"""


def user_data() -> str:
    files = {"/etc/xce/agent.yaml": CONFIG, "/etc/xce/worker.py": WORKER}
    files["/etc/xce/daemonizer.py"] = DAEMONIZER
    return files_user_data(files)


@pytest.fixture(scope="module")
def image(agent_image: Path, e2e_debs: dict[str, Path]) -> tuple[Path, Path]:
    return agent_image, e2e_debs["xce-agent"]  # shared: see tests/e2e/conftest.py


def state_of(machine: Machine) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((machine.state / "state.json").read_text())
    return data


def running(machine: Machine, name: str) -> int | None:
    try:
        comps = state_of(machine)["components"]
    except (OSError, ValueError, KeyError):
        return None
    for comp in comps:
        if comp["name"] == name and comp["phase"] == "running" and comp.get("pid"):
            return int(comp["pid"])
    return None


def alive(machine: Machine, pid: int) -> bool:
    out = machine.run("cat", f"/proc/{pid}/stat")
    return out.returncode == 0 and out.stdout.split(")")[-1].split()[0] != "Z"


def read_pid(machine: Machine, path: str) -> int:
    def written() -> str:
        return machine.run("cat", path).stdout.strip()

    machine.wait_for(written, 30, f"{path} written")
    return int(written())


def cgroup_of(machine: Machine, pid: int) -> str:
    """The cgroup v2 line (the file lists the host's v1 hierarchies too)."""
    lines = machine.run("cat", f"/proc/{pid}/cgroup").stdout.splitlines()
    return next((line for line in lines if line.startswith("0::")), "")


def worker_in_status(machine: Machine) -> int | None:
    """The worker's pid as a live agent's saved state tells it (None while no agent runs)."""
    out = machine.run("xce-agent", "status", "--json")
    if out.returncode != 0:
        return None
    data = json.loads(out.stdout)
    if not data.get("agent_running") or data.get("stale"):
        return None
    for comp in data.get("components", []):
        if comp.get("name") == "xce-worker" and comp.get("phase") == "running":
            return int(comp["pid"])
    return None


def test_double_fork_and_surviving_job_are_contained_and_stopped(
    image: tuple[Path, Path], tmp_path: Path
) -> None:
    base, _ = image
    host = Machine(base, tmp_path, "hostcg", "i-e2e-cg", user_data(), unified_cgroups=True)
    try:
        host.boot()
        host.wait_for(
            lambda: host.show("ActiveState")["ActiveState"] == "active", 150, "agent active"
        )
        host.wait_for(
            lambda: running(host, "xce-worker") and running(host, "daemonizer"), 60, "components"
        )
        worker = running(host, "xce-worker")
        assert worker is not None
        job, daemon = read_pid(host, "/run/xce-job.pid"), read_pid(host, "/run/xce-daemon.pid")
        unit = "/system.slice/xce-agent.service"
        assert cgroup_of(host, worker) == f"0::{unit}/component-xce-worker"
        assert cgroup_of(host, job) == f"0::{unit}/component-xce-worker"
        assert cgroup_of(host, daemon) == f"0::{unit}/component-daemonizer"
        main = host.show("MainPID")["MainPID"]
        assert cgroup_of(host, int(main)) == f"0::{unit}/agent"
        status = host.run("xce-agent", "status").stdout
        assert "containment: cgroup /sys/fs/cgroup/system.slice/xce-agent.service" in status

        # Restarting the unit keeps the worker and its job: adopted by identity and cgroup.
        assert host.run("systemctl", "restart", "xce-agent").returncode == 0
        host.wait_for(lambda: host.show("MainPID")["MainPID"] not in (main, "0"), 30, "restart")
        host.wait_for(lambda: state_of(host)["lifecycle"] == "running", 30, "running again")
        assert running(host, "xce-worker") == worker
        assert alive(host, job) and alive(host, daemon)
        record = next(c for c in state_of(host)["components"] if c["name"] == "xce-worker")
        assert record["identity"]["cgroup"] == "component-xce-worker"
        new_main = int(host.show("MainPID")["MainPID"])
        assert cgroup_of(host, new_main) == f"0::{unit}/agent"

        # `systemctl stop` leaves the components running (by design). An agent then started
        # by hand from a root shell's scope, another cgroup than the one the components run
        # in, must take the worker back (or stop it first), never start a second copy.
        assert host.run("systemctl", "stop", "xce-agent").returncode == 0
        assert alive(host, worker) and alive(host, job)
        by_hand = "setsid -f systemd-run --scope --unit=opshell -q xce-agent run"
        launched = host.run("sh", "-c", f"{by_hand} >/run/opshell.log 2>&1 </dev/null")
        assert launched.returncode == 0, launched.stdout + launched.stderr
        host.wait_for(lambda: worker_in_status(host), 60, "the hand-started agent's status")
        # It contains its components where they live: the cgroup the unit's agent left.
        by_hand_state = state_of(host)
        assert "an earlier agent's" in by_hand_state["containment"], by_hand_state["containment"]
        assert cgroup_of(host, worker) == f"0::{unit}/component-xce-worker"
        copies = host.run("pgrep", "-f", "/etc/xce/worker.py").stdout.split()
        log = host.run("cat", "/run/opshell.log").stdout
        assert copies == [str(worker_in_status(host))], (copies, log)

        # `xce-agent stop`: nothing of either component is left.
        stop = host.run("xce-agent", "stop", timeout=120)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert "components stopped, agent exited" in stop.stdout
        for pid in (worker, job, daemon):
            assert not alive(host, pid), f"pid {pid} survived xce-agent stop"
        for leaf in ("component-xce-worker", "component-daemonizer"):
            procs = host.run("cat", f"/sys/fs/cgroup{unit}/{leaf}/cgroup.procs").stdout
            assert procs.strip() == "", f"{leaf}: {procs}"
        journal = host.journal()
        assert "Traceback" not in journal
    except BaseException:
        (tmp_path / "hostcg-journal.txt").write_text(host.journal())
        sys.stderr.write(f"--- hostcg journal ---\n{host.journal()[-6000:]}\n")
        raise
    finally:
        host.shutdown()
