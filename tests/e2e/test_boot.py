"""End to end: the .deb in a bookworm image, cloud-init user-data, systemd, two hosts.

Needs root, systemd-nspawn, debootstrap, dpkg-buildpackage and nsenter; skipped with the
reason otherwise. The rootfs is cached outside the repository (see machines.cache_tarball).
"""

from __future__ import annotations

import json
import shutil
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
    ensure_rootfs_cache,
    prepare_base,
)
from tests.integration.controller_proc import ControllerProcess

ROOT = Path(__file__).resolve().parents[2]
pytestmark = boot_marks()

CLUSTER = """\
version: 1
heartbeat_interval: 1s
host_loss_grace: 30s
agent_max_restart_backoff: 5s
rejoin_allowance: 5s
unmatched_joins: refuse
templates:
  default: {slots: 2}
"""


def render(url: str, extra: list[str] | None = None) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "xce_agent",
            "render-user-data",
            "--controller-url",
            url,
            "--template",
            "default",
            "--instance-id",
            "auto",
            "--worker-command",
            "/usr/bin/xce-agent sample-worker",
            *(extra or []),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ctl = ControllerProcess(tmp, CLUSTER).start()
        self.machines: list[Machine] = []

    def api(self, method: str, path: str, **kw: Any) -> Any:
        headers = self.ctl.admin_headers()
        return requests.request(
            method, self.ctl.url + path, timeout=10, headers=headers, **kw
        ).json()


def token_file(cluster: Cluster, tmp: Path, iid: str, name: str) -> list[str]:
    """Record the instance with a minted single-use join token; render-user-data options."""
    recorded = cluster.api(
        "POST",
        "/v1/expected",
        json={
            "instance_id": iid,
            "template": "default",
            "expected_name": name,
            "mint_join_token": True,
        },
    )
    path = tmp / f"{iid}.join-token"
    path.write_text(recorded["join_token"] + "\n")
    return ["--token-file", str(path)]


@pytest.fixture(scope="module")
def image(
    tmp_path_factory: pytest.TempPathFactory, e2e_debs: dict[str, Path]
) -> Iterator[tuple[Path, Path]]:
    # A base of its own, from the session's .debs: the purge test changes it.
    deb = e2e_debs["xce-agent"]
    base = tmp_path_factory.mktemp("e2e-image") / "base"
    prepare_base(ensure_rootfs_cache(), base, e2e_debs["python3-xce-protocol"], deb)
    yield base, deb
    shutil.rmtree(base, ignore_errors=True)


def state_of(machine: Machine) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((machine.state / "state.json").read_text())
    return data


def worker_pid(machine: Machine) -> int | None:
    try:
        comp = state_of(machine)["components"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return int(comp["pid"]) if comp.get("phase") == "running" and comp.get("pid") else None


def test_unit_and_user_data_validate_inside_the_image(
    image: tuple[Path, Path], tmp_path: Path
) -> None:
    base, _ = image
    # The minimal image has no man-db to look the page up; check it is installed instead.
    assert (base / "usr/share/man/man1/xce-agent.1.gz").exists()
    verify = chroot(base, "systemd-analyze", "verify", "--man=no", "xce-agent.service")
    assert verify.returncode == 0 and verify.stdout.strip() == "" and verify.stderr.strip() == ""
    files = {p.name: p.read_text() for p in (ROOT / "cloud-init").glob("*.yaml")}
    token = tmp_path / "join-token"
    token.write_text("a-join-token\n")
    files["rendered.yaml"] = render("http://127.0.0.1:7870", ["--token-file", str(token)])
    # With the worker's user: cloud-init's users: entry for it must pass the schema too.
    with_user = ["--token-file", str(token), "--worker-user", "xceworker"]
    files["rendered-user.yaml"] = render("http://127.0.0.1:7870", with_user)
    assert "name: xceworker" in files["rendered-user.yaml"]  # the entry is there to check
    for name, text in files.items():
        (base / "tmp" / name).write_text(text)
        schema = chroot(base, "cloud-init", "schema", "--config-file", f"/tmp/{name}")
        assert schema.returncode == 0, f"{name}: {schema.stdout}{schema.stderr}"


def test_two_hosts_boot_join_restart_and_decommission(
    image: tuple[Path, Path], tmp_path: Path
) -> None:
    base, deb = image
    cluster = Cluster(tmp_path)
    url = cluster.ctl.url
    data = {}
    for name, iid in (("hosta", "i-e2e-a"), ("hostb", "i-e2e-b")):
        data[name] = render(url, token_file(cluster, tmp_path, iid, name))
    a = Machine(base, tmp_path, "hosta", "i-e2e-a", data["hosta"])
    b = Machine(
        base, tmp_path, "hostb", "i-e2e-b", data["hostb"], extra_binds=(f"{deb}:/tmp/{deb.name}",)
    )
    cluster.machines = [a, b]
    try:
        a.boot()
        b.boot()
        for m in (a, b):
            m.wait_for(
                lambda m=m: (
                    "status: done" in m.run("cloud-init", "status", "--wait", timeout=120).stdout
                ),
                150,
                "cloud-init",
            )
            status = m.run("cloud-init", "status", "--long").stdout
            assert "errors: []" in status or "errors" not in status, status
            m.wait_for(
                lambda m=m: m.show("ActiveState")["ActiveState"] == "active", 60, "xce-agent active"
            )
            m.wait_for(lambda m=m: worker_pid(m), 60, "worker running")
            text = m.show("StatusText")["StatusText"]
            assert "xce-worker running" in text and f"controller connected as {m.name}" in text
            host = cluster.api("GET", f"/v1/hosts/{m.name}")
            assert host["state"] == "open" and host["provisioned"] and host["key"] == m.instance

        b_pid = worker_pid(b)
        # systemctl restart keeps the worker (KillMode=process, adoption).
        a_pid = worker_pid(a)
        main_before = a.show("MainPID")["MainPID"]
        assert a.run("systemctl", "restart", "xce-agent").returncode == 0
        a.wait_for(lambda: a.show("MainPID")["MainPID"] != main_before, 30, "agent restart")
        a.wait_for(lambda: state_of(a)["lifecycle"] == "running", 30, "agent running again")
        assert worker_pid(a) == a_pid

        # A package upgrade restarts the agent, not the worker.
        b_main = b.show("MainPID")["MainPID"]
        upgrade = b.run("dpkg", "-i", f"/tmp/{deb.name}")
        assert upgrade.returncode == 0, upgrade.stderr
        b.wait_for(lambda: b.show("MainPID")["MainPID"] not in (b_main, "0"), 30, "upgrade restart")
        b.wait_for(lambda: state_of(b)["lifecycle"] == "running", 30, "agent running again")
        assert worker_pid(b) == b_pid

        # Killing the worker gets it restarted.
        assert a_pid is not None
        a.run("kill", "-9", str(a_pid))
        a.wait_for(lambda: worker_pid(a) not in (None, a_pid), 30, "worker restart")

        # Decommissioning A stops its worker, for good; B is untouched.
        cluster.api("POST", "/v1/hosts/hosta/decommission", json={"reason": "e2e reclaim"})
        a.wait_for(lambda: state_of(a)["components"][0]["phase"] == "stopped", 30, "A stopped")
        assert state_of(a)["tombstone"]["reason"] == "e2e reclaim"
        a.wait_for(
            lambda: "decommissioned: e2e reclaim" in a.show("StatusText")["StatusText"],
            10,
            "STATUS decommissioned",
        )
        agent_before = state_of(a)["agent"]["pid"]
        assert a.run("systemctl", "restart", "xce-agent").returncode == 0
        a.wait_for(
            lambda: (
                state_of(a)["agent"]["pid"] != agent_before
                and state_of(a)["lifecycle"] == "running"
                and state_of(a)["controller"]["state"] == "decommissioned"
            ),
            30,
            "tombstone kept",
        )
        assert worker_pid(a) is None
        a.shutdown()
        a.boot()
        a.wait_for(
            lambda: a.show("ActiveState")["ActiveState"] == "active",
            120,
            "agent active after reboot",
        )
        a.wait_for(
            lambda: (
                state_of(a)["lifecycle"] == "running"
                and state_of(a)["controller"]["state"] == "decommissioned"
            ),
            30,
            "still decommissioned",
        )
        assert worker_pid(a) is None
        assert worker_pid(b) == b_pid
        assert cluster.api("GET", "/v1/hosts/hostb")["state"] == "open"
    except BaseException:
        for m in (a, b):
            (tmp_path / f"{m.name}-journal.txt").write_text(m.journal())
            sys.stderr.write(f"--- {m.name} journal ---\n{m.journal()[-4000:]}\n")
        raise
    finally:
        for m in (a, b):
            m.shutdown()
        cluster.ctl.stop()


def test_broken_config_fails_with_78_and_no_restart_loop(
    image: tuple[Path, Path], tmp_path: Path
) -> None:
    base, _ = image
    user_data = (
        "#cloud-config\nwrite_files:\n- path: /etc/xce/agent.yaml\n  content: |\n"
        "    version: 7\n    instance: {id: auto}\n    roles: {wrker: {}}\n"
        "runcmd:\n- [systemctl, enable, --now, xce-agent.service]\n"
    )
    c = Machine(base, tmp_path, "hostc", "i-e2e-c", user_data)
    try:
        c.boot()
        c.wait_for(lambda: c.show("ActiveState")["ActiveState"] == "failed", 150, "unit failed")
        props = c.show("ExecMainStatus", "NRestarts", "Result")
        assert props["ExecMainStatus"] == "78" and props["NRestarts"] == "0"
        journal = c.journal()
        assert "version: expected 1, got 7" in journal
        assert "Traceback" not in journal
    finally:
        c.shutdown()


def test_purge_removes_the_state(image: tuple[Path, Path]) -> None:
    """Runs last in this module: it removes the package from the shared image."""
    base, _ = image
    state = base / "var/lib/xce-agent"
    state.mkdir(exist_ok=True)
    (state / "state.json").write_text("{}")
    purge = chroot(base, "dpkg", "--purge", "xce-agent")
    assert purge.returncode == 0, purge.stderr
    assert not state.exists()
    assert not (base / "usr/bin/xce-agent").exists()
