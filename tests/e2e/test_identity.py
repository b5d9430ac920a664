"""End to end: a host keeps its identity across an agent restart and a reboot, one join only;
a second machine booted with a copy of its state directory is refused and recorded.

Same machinery and skips as test_boot.py (real systemd and cloud-init in systemd-nspawn).
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.machines import Machine
from tests.e2e.test_boot import CLUSTER, pytestmark, render, state_of, worker_pid
from tests.integration.controller_proc import ControllerProcess

__all__ = ["pytestmark"]  # the same skips as test_boot.py


@pytest.fixture(scope="module")
def image(agent_image: Path) -> Path:
    return agent_image  # shared: see tests/e2e/conftest.py


class Controller:
    def __init__(self, tmp: Path) -> None:
        self.ctl = ControllerProcess(tmp, CLUSTER).start()

    def api(self, method: str, path: str, **kw: Any) -> Any:
        headers = self.ctl.admin_headers()
        r = requests.request(method, self.ctl.url + path, timeout=10, headers=headers, **kw)
        return r.json()

    def facts(self, *kinds: str) -> list[str]:
        db = sqlite3.connect(f"file:{self.ctl.db}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT kind FROM facts ORDER BY seq").fetchall()
        finally:
            db.close()
        return [k for (k,) in rows if k in kinds]

    def joins(self) -> int:
        return len(self.facts("joined", "rejoined"))


def contact(m: Machine) -> dict[str, Any]:
    try:
        found: dict[str, Any] = state_of(m)["controller"]
    except (OSError, ValueError, KeyError):
        return {}
    return found


def test_restart_and_reboot_keep_the_host_and_a_clone_is_refused(
    image: Path, tmp_path: Path
) -> None:
    ctl = Controller(tmp_path)
    recorded = ctl.api(
        "POST",
        "/v1/expected",
        json={
            "instance_id": "i-e2e-id",
            "template": "default",
            "expected_name": "hostid",
            "mint_join_token": True,
        },
    )
    token = tmp_path / "join-token"
    token.write_text(recorded["join_token"] + "\n")
    user_data = render(ctl.ctl.url, ["--token-file", str(token)])
    m = Machine(image, tmp_path, "hostid", "i-e2e-id", user_data)
    # The clone: another machine, same host name and instance (booted from a copied disk).
    (tmp_path / "clone").mkdir()
    clone = Machine(image, tmp_path / "clone", "hostid", "i-e2e-id", user_data)
    machines = [m, clone]
    try:
        m.boot()
        m.wait_for(lambda: worker_pid(m), 150, "worker running")
        assert ctl.joins() == 1
        assert (m.state / "credential.json").stat().st_mode & 0o777 == 0o600
        pid = worker_pid(m)

        # An agent restart: the worker is adopted, the host resumes with its credential.
        main = m.show("MainPID")["MainPID"]
        assert m.run("systemctl", "restart", "xce-agent").returncode == 0
        m.wait_for(lambda: m.show("MainPID")["MainPID"] != main, 30, "agent restart")
        m.wait_for(lambda: "resumed as hostid" in contact(m).get("detail", ""), 30, "resumed")
        assert worker_pid(m) == pid and ctl.joins() == 1
        # Not a shutdown: no notice, the host stays open.
        assert ctl.facts("notice") == [] and ctl.api("GET", "/v1/hosts/hostid")["state"] == "open"

        # A reboot: cloud-init writes the (used) join token again; the credential carries on.
        # The poweroff is announced (a shutdown notice closes the host); the next boot of the
        # container, on the same kernel, is a new boot all the same (PID 1 started again), so
        # the host reopens.
        m.shutdown()
        assert ctl.api("GET", "/v1/hosts/hostid")["notice"]["kind"] == "shutdown"
        image_copy = {n: (m.state / n).read_bytes() for n in ("credential.json", "template.json")}
        m.boot()
        m.wait_for(lambda: worker_pid(m), 150, "worker running after the reboot")
        m.wait_for(lambda: "resumed as hostid" in contact(m).get("detail", ""), 30, "resumed")
        assert ctl.joins() == 1
        host = ctl.api("GET", "/v1/hosts/hostid")
        assert host["state"] == "open" and host["incarnation"] == 3  # join + two renewals
        assert host["notice"] is None and host["history"][-1]["code"] == "notice_ended"
        m.wait_for(lambda: "hostid" in m.show("StatusText")["StatusText"], 30, "STATUS connected")

        # A second machine booted from the image taken before the reboot: stale, recorded.
        seen = ctl.api("GET", "/v1/hosts/hostid")["last_seen"]
        m.wait_for(lambda: ctl.api("GET", "/v1/hosts/hostid")["last_seen"] > seen, 30, "heartbeat")
        for name, data in image_copy.items():
            (clone.state / name).write_bytes(data)
            (clone.state / name).chmod(0o600)
        clone.boot()
        clone.wait_for(
            lambda: "stale_incarnation" in contact(clone).get("detail", ""), 150, "clone refused"
        )
        assert worker_pid(clone) is None
        host = ctl.api("GET", "/v1/hosts/hostid")
        assert host["refusals"] >= 1 and host["last_refusal"].startswith("stale_incarnation")
        assert worker_pid(m) is not None and ctl.joins() == 1
    except BaseException:
        for machine in machines:
            sys.stderr.write(f"--- {machine.name} journal ---\n{machine.journal()[-4000:]}\n")
        raise
    finally:
        for machine in machines:
            machine.shutdown()
        ctl.ctl.stop()
