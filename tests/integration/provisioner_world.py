"""A controller, sushy-tools' Redfish emulator and `xce-provisioner run`, all on loopback.

`Host` stands in for the machine once it is powered on: it joins with the cluster's join
token and reports the jobs it is given, as its agent and worker would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from tests.integration.controller_proc import ControllerProcess
from tests.integration.redfish_emulator import Emulator

PROV_TOKEN = "prov-token-for-tests-0123456789"
CLUSTER = """\
version: 1
templates:
  default: {slots: 4}
  small: {slots: 2}
auth:
  provisioner_token_file: %s
"""


class World:
    def __init__(
        self, tmp: Path, machines: list[str], delay: int | None = None, **policy: Any
    ) -> None:
        self.tmp = tmp
        token = tmp / "prov-token"
        token.write_text(PROV_TOKEN + "\n")
        self.ctl = ControllerProcess(tmp, CLUSTER % token).start()
        self.bmc = Emulator(tmp, machines, delay).start()
        self.machines = machines
        self.provisioners: list[subprocess.Popen[bytes]] = []
        self.config = tmp / "provisioner.yaml"
        self.write_config(**policy)

    def write_config(self, **policy: Any) -> None:
        settings = {"interval": "0.3s", "graceful_timeout": "20s", "settle_timeout": "15s"}
        settings.update({k: str(v) for k, v in policy.items()})
        lines = [
            f"controller: {{url: {self.ctl.url}, token_file: {self.tmp / 'prov-token'}}}",
            *(f"{k}: {v}" for k, v in settings.items()),
            f"bmcs: {{lab: {{url: {self.bmc.url}, timeout: 3s}}}}",
            "machines:",
        ]
        for name in self.machines:
            lines.append(
                f"  - {{name: {name}, instance_id: rf-{name}, template: small, bmc: lab, "
                f"system: {self.bmc.system(name)}}}"
            )
        self.config.write_text("\n".join(lines) + "\n")

    def start_provisioner(self, lease: str = "", token: int = 0) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        if lease:
            env.update(XCE_LEASE_NAME=lease, XCE_LEASE_TOKEN=str(token))
        with open(self.tmp / "provisioner.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "xce_provisioner", "run", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.provisioners.append(proc)
        return proc

    def log(self) -> str:
        path = self.tmp / "provisioner.log"
        return path.read_text() if path.exists() else ""

    # --- the controller, as an operator and as the provisioner would call it -------------

    def admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        answer = requests.request(
            method, self.ctl.url + path, json=body, headers=self.ctl.admin_headers(), timeout=10
        )
        answer.raise_for_status()
        return answer.json()

    def xcecli(self, *args: str) -> str:
        env = {
            **os.environ,
            "XCE_CONTROLLER_URL": self.ctl.url,
            "XCE_ADMIN_TOKEN_FILE": f"{self.ctl.db}.admin-token",
        }
        out = subprocess.run(
            [sys.executable, "-m", "xce_controller.cli.xcecli", *args],
            capture_output=True,
            text=True,
            timeout=30,
            env=env,
            check=True,
        )
        return out.stdout

    def record(self, name: str) -> dict[str, Any]:
        for r in self.admin("GET", "/v1/provisioned"):
            if r["instance_id"] == f"rf-{name}":
                return dict(r)
        return {}

    def steps(self, name: str) -> list[tuple[str, str, int]]:
        return [(s["action"], s["phase"], s["attempt"]) for s in self.record(name).get("power", [])]

    def close(self) -> None:
        for proc in self.provisioners:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.bmc.stop()
        self.ctl.stop()


class Host:
    """The booted machine: joins as its instance, runs the jobs it is given."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        body = {"host": name, "instance_id": f"rf-{name}", "boot_id": uuid.uuid4().hex}
        answer = requests.post(
            world.ctl.url + "/v1/join",
            json=body,
            headers={"Authorization": f"Bearer {world.ctl.join_token()}"},
            timeout=10,
        )
        answer.raise_for_status()
        self.credential = answer.json()["credential"]

    def report(self, job_id: int, event: str, exit_code: int = 0) -> None:
        answer = requests.post(
            f"{self.world.ctl.url}/v1/hosts/{self.name}/jobs/{job_id}/{event}",
            json={"exit_code": exit_code},
            headers={"Authorization": f"Bearer {self.credential}"},
            timeout=10,
        )
        answer.raise_for_status()


def wait_until(predicate: Any, timeout: float, what: str) -> float:
    """Seconds it took; fails with `what` after `timeout`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")
