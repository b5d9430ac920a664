"""End to end from the packages alone: the controller .deb on one host, the agent's on two more.

Three systemd-nspawn containers booted under real systemd. The controller's host has only
Debian 12's archive besides python3-xce-protocol and xce-controller (FastAPI 0.92, pydantic
1.10, uvicorn 0.17); the agents' hosts have python3-xce-protocol and xce-agent, no controller
code. The containers share the host's network namespace, so the controller listens on a free
loopback port that the agents and this test reach. Then: the agents join, xcecli decommissions
one host (its worker stops for good, the other keeps working, the controller's restart loses
nothing), and `apt remove xce-agent` stops the other host's worker, keeps its state, and purge
deletes it.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.machines import (
    Machine,
    boot_marks,
    chroot,
    ensure_controller_cache,
    prepare_base,
)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = boot_marks()

CLUSTER = """\
version: 1
heartbeat_interval: 1s
host_loss_grace: 30s
agent_max_restart_backoff: 5s
rejoin_allowance: 5s
unmatched_joins: refuse
defaults: {join_deadline: 10m, drain_timeout: 20s, drain_policy: requeue}
templates:
  default: {slots: 2}
"""
TOKEN_FILE = "/var/lib/xce-controller/controller.db.admin-token"
# Every entry point of the xce distributions installed, and whether it loads.
ENTRY_POINTS = """\
import importlib.metadata as md, json
found = {}
for dist in md.distributions():
    if dist.metadata["Name"].startswith("xce-"):
        for ep in dist.entry_points:
            try:
                ep.load()
                found[ep.name] = "ok"
            except Exception as exc:
                found[ep.name] = repr(exc)
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def images(
    tmp_path_factory: pytest.TempPathFactory, e2e_debs: dict[str, Path], agent_image: Path
) -> Iterator[dict[str, Path]]:
    # The agents' hosts boot the shared image (read, never changed: see conftest.py); the
    # controller's base is this module's own, from the session's .debs, as the test writes the
    # controller's config into it.
    controller_base = tmp_path_factory.mktemp("e2e-cluster") / "controller-base"
    protocol = e2e_debs["python3-xce-protocol"]
    prepare_base(ensure_controller_cache(), controller_base, protocol, e2e_debs["xce-controller"])
    yield {"agent": agent_image, "controller": controller_base, **e2e_debs}
    shutil.rmtree(controller_base, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def render(url: str, token_file: Path) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "xce_agent",
            "render-user-data",
            "--controller-url",
            url,
            "--instance-id",
            "auto",
            "--token-file",
            str(token_file),
            "--worker-command",
            "/usr/bin/xce-agent sample-worker",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def state_of(machine: Machine) -> dict[str, Any]:
    out = machine.run("cat", "/var/lib/xce-agent/state.json")
    data: dict[str, Any] = json.loads(out.stdout) if out.returncode == 0 else {}
    return data


def standing(machine: Machine) -> str:
    """Where the agent says its host stands with the controller."""
    return str((state_of(machine).get("controller") or {}).get("state", ""))


def worker_pid(machine: Machine) -> int | None:
    comps = state_of(machine).get("components") or [{}]
    comp = comps[0]
    return int(comp["pid"]) if comp.get("phase") == "running" and comp.get("pid") else None


def alive(machine: Machine, pid: int) -> bool:
    return machine.run("kill", "-0", str(pid)).returncode == 0


def test_images_hold_their_own_package_whose_entry_points_load(
    images: dict[str, Path],
) -> None:
    agent = images["agent"]
    assert not list(agent.glob("usr/lib/python3/dist-packages/xce_controller*"))
    assert not (agent / "usr/bin/xcecli").exists()
    out = chroot(agent, "python3", "-c", ENTRY_POINTS)
    assert json.loads(out.stdout) == {"xce-agent": "ok"}, out.stderr
    out = chroot(images["controller"], "python3", "-c", ENTRY_POINTS)
    assert json.loads(out.stdout) == {"xce-controller": "ok", "xcecli": "ok"}, out.stderr
    for image, unit in (("agent", "xce-agent.service"), ("controller", "xce-controller.service")):
        verify = chroot(images[image], "systemd-analyze", "verify", "--man=no", unit)
        assert (verify.returncode, verify.stdout + verify.stderr) == (0, ""), verify
    version = "import pydantic; print(pydantic.VERSION)"
    pydantic = chroot(images["controller"], "python3", "-c", version)
    assert pydantic.stdout.startswith("1."), pydantic  # Debian 12's pydantic 1.10


class Cluster:
    """The controller's container (from its .deb) and the API it serves on loopback."""

    def __init__(self, images: dict[str, Path], tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        base = images["controller"]
        (base / "etc/xce/controller.yaml").write_text(CLUSTER)
        dropin = base / "etc/systemd/system/xce-controller.service.d"
        dropin.mkdir(parents=True, exist_ok=True)
        (dropin / "listen.conf").write_text(
            f"[Service]\nEnvironment=XCE_CONTROLLER_LISTEN=127.0.0.1:{self.port}\n"
        )
        # The controller's state is bound from here, so a test can look at it.
        self.host = Machine(
            base,
            tmp,
            "xcectl",
            "i-e2e-ctl",
            "#cloud-config\n{}\n",
            state_dir="/var/lib/xce-controller",
        )

    def start(self) -> Cluster:
        self.host.boot()
        self.host.wait_for(self.answers, 60, "controller answers")
        return self

    def answers(self) -> bool:
        return requests.get(self.url + "/v1/info", timeout=2).status_code == 200

    def xcecli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.host.run("xcecli", "--url", self.url, "--token-file", TOKEN_FILE, *args)

    def api(self, path: str) -> Any:
        token = (self.host.state / "controller.db.admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        return requests.get(self.url + path, headers=headers, timeout=10).json()


def test_decommission_across_three_hosts_and_package_removal(
    images: dict[str, Path], tmp_path: Path
) -> None:
    cluster = Cluster(images, tmp_path)
    machines = [cluster.host]
    try:
        cluster.start()
        unit = cluster.host.show("ActiveState", unit="xce-controller.service")
        assert unit["ActiveState"] == "active", unit
        # The provisioner's way: each instance is expected with a join token of its own,
        # minted by the controller and printed once, which goes into its user-data.
        for name, instance in (("hosta", "i-e2e-a"), ("hostb", "i-e2e-b")):
            expect = cluster.xcecli(
                "expect", instance, "--template", "default", "--name", name, "--mint-join-token"
            )
            assert expect.returncode == 0, expect.stderr
            token_file = tmp_path / f"{name}-join-token"
            token_file.write_text(expect.stdout.strip().splitlines()[-1].split()[-1] + "\n")
            user_data = render(cluster.url, token_file)
            machines.append(
                Machine(images["agent"], tmp_path, name, instance, user_data, state_dir=None)
            )
        a, b = machines[1:]
        for m in (a, b):
            m.boot()
        for m in (a, b):
            m.wait_for(lambda m=m: worker_pid(m), 150, "worker running")
            host = cluster.api(f"/v1/hosts/{m.name}")
            assert host["state"] == "open" and host["key"] == m.instance, host

        # The controller restarts from its database: both hosts are still there, still open,
        # and the generated admin token is the same.
        token_path = cluster.host.state / "controller.db.admin-token"
        token = token_path.read_text()
        assert cluster.host.run("systemctl", "restart", "xce-controller").returncode == 0
        cluster.host.wait_for(cluster.answers, 60, "controller answers after restart")
        assert token_path.read_text() == token
        reload = cluster.host.run("systemctl", "reload", "xce-controller")
        assert reload.returncode == 0, reload.stderr
        assert cluster.host.show("MainPID", unit="xce-controller.service")["MainPID"] != "0"
        assert {cluster.api(f"/v1/hosts/{m.name}")["state"] for m in (a, b)} == {"open"}

        # xcecli decommissions A: its worker stops for good, B keeps working.
        a_pid, b_pid = worker_pid(a), worker_pid(b)
        assert a_pid is not None and b_pid is not None
        # The worker (and so its jobs) gets the system's umask, not one meant for the agent.
        umask = b.run("grep", "^Umask:", f"/proc/{b_pid}/status").stdout.split()
        assert umask == ["Umask:", "0022"], umask
        done = cluster.xcecli("decommission", "hosta", "--reason", "e2e reclaim")
        assert done.returncode == 0, done.stderr
        a.wait_for(lambda: standing(a) == "decommissioned", 60, "A decommissioned")
        a.wait_for(lambda: not alive(a, a_pid), 30, "A's worker gone")
        assert state_of(a)["tombstone"]["reason"] == "e2e reclaim"
        agent_before = state_of(a)["agent"]["pid"]
        assert a.run("systemctl", "restart", "xce-agent").returncode == 0
        a.wait_for(
            lambda: (
                state_of(a)["agent"]["pid"] != agent_before
                and state_of(a)["lifecycle"] == "running"
                and standing(a) == "decommissioned"
            ),
            30,
            "tombstone kept",
        )
        assert worker_pid(a) is None
        assert cluster.api("/v1/hosts/hosta")["state"] == "decommissioned"
        listed = cluster.xcecli("to-return")
        assert "i-e2e-a" in listed.stdout, listed
        assert worker_pid(b) == b_pid and alive(b, b_pid)
        assert cluster.api("/v1/hosts/hostb")["state"] == "open"

        # Removing the package stops B's worker through the agent; the state stays.
        removed = b.run("apt-get", "remove", "-y", "xce-agent", timeout=120)
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert not alive(b, b_pid)
        assert b.show("ActiveState")["ActiveState"] in ("inactive", "failed", "")
        kept = state_of(b)
        assert kept["components"][0]["phase"] == "stopped", kept
        assert b.run("test", "-e", "/usr/bin/xce-agent").returncode != 0
        # ... and purge deletes it.
        purged = b.run("dpkg", "--purge", "xce-agent")
        assert purged.returncode == 0, purged.stderr
        assert b.run("test", "-e", "/var/lib/xce-agent").returncode != 0
    except BaseException:
        for m in machines:
            journal = m.journal()
            (tmp_path / f"{m.name}-journal.txt").write_text(journal)
            sys.stderr.write(f"--- {m.name} journal ---\n{journal[-4000:]}\n")
        raise
    finally:
        for m in machines:
            m.shutdown()
