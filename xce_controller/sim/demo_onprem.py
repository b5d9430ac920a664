"""`xce-controller demo --onprem` (`make demo-onprem`): the on-premise story, in about a minute.

An embedded controller, sushy-tools' Redfish emulator (its fake driver: no hardware, each power
change applied 1 to 11 s after it is asked for) and `xce-provisioner run` in its own process.
An instance is expected and powered on; an agent stands in for the booted machine and joins;
a job runs; the host is decommissioned, drained, shut down gracefully and returned; expected
again, it is powered on and joins as a new life of the same record. Every step is checked, and
the two figures the provisioner promises (powered on within 15 s of the expect, powered off
and returned within 15 s of the drain's end) are measured and held to.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from xce_controller.sim.demo import DemoFailed

MACHINE = "node1"
INSTANCE = "rf-node1"
PROMISE = 15.0
PROV_TOKEN = "demo-provisioner-token-0123456789"  # noqa: S105 - a throwaway for the demo


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OnPremDemo:
    def __init__(self, out: Callable[[str], None]) -> None:
        self.out = out
        self.began = time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="xce-demo-onprem-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.agent: subprocess.Popen[bytes] | None = None
        self.controller: Any = None
        self.url = ""
        self.bmc = f"http://127.0.0.1:{_free_port()}"
        self.system = f"/redfish/v1/Systems/{uuid.uuid5(uuid.NAMESPACE_DNS, MACHINE)}"

    def say(self, text: str) -> None:
        self.out(f"[{time.monotonic() - self.began:5.1f}s] {text}")

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 20.0) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if check():
                return time.monotonic() - start
            time.sleep(0.1)
        raise DemoFailed(f"{what}: did not happen within {timeout:.0f}s")

    def api(self, method: str, path: str, token: str = "", **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else self.controller.admin_headers
        answer = requests.request(method, self.url + path, timeout=10, headers=headers, **kw)
        if answer.status_code >= 400:
            raise DemoFailed(f"{method} {path}: {answer.status_code} {answer.text[:200]}")
        return answer.json()

    def power(self) -> str:
        try:
            return str(requests.get(self.bmc + self.system, timeout=5).json()["PowerState"])
        except (requests.RequestException, ValueError, KeyError):
            return ""

    def record(self) -> dict[str, Any]:
        found = [r for r in self.api("GET", "/v1/provisioned") if r["instance_id"] == INSTANCE]
        return found[0] if found else {}

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    # --- the story ----------------------------------------------------------------------
    def run(self) -> None:
        self.start_controller()
        self.start_bmc()
        self.start_provisioner()
        self.expect_and_power_on("")
        self.boot_and_join()
        self.run_a_job_and_decommission()
        self.expect_and_power_on("again ")
        self.boot_and_join()
        self.show_why()

    def start_controller(self) -> None:
        from xce_controller.core.config import load_cluster_config
        from xce_controller.http.server import EmbeddedController

        (self.tmp / "prov-token").write_text(PROV_TOKEN + "\n")
        config = self.tmp / "cluster.yaml"
        config.write_text(
            "version: 1\nheartbeat_interval: 2s\nhost_loss_grace: 20s\n"
            "agent_max_restart_backoff: 5s\nrejoin_allowance: 5s\n"
            "templates:\n  default: {slots: 2}\n  rack-small: {slots: 2}\n"
            f"auth: {{provisioner_token_file: {self.tmp / 'prov-token'}}}\n"
        )
        self.controller = EmbeddedController(load_cluster_config(config), self.tmp / "ctl.db")
        self.controller.start()
        self.url = self.controller.url
        self.say(f"The reference controller is up at {self.url}.")

    def start_bmc(self) -> None:
        port = self.bmc.rsplit(":", 1)[1]
        fake = [{"uuid": self.system.rsplit("/", 1)[1], "name": MACHINE, "power_state": "Off"}]
        conf = self.tmp / "emulator.conf"
        conf.write_text(
            f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {port}\n"
            "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
            f"SUSHY_EMULATOR_STATE_DIR = {str(self.tmp / 'bmc-state')!r}\n"
            f"SUSHY_EMULATOR_FAKE_SYSTEMS = {fake!r}\n"
        )
        emulator = shutil.which("sushy-emulator", path=str(Path(sys.executable).parent))
        if emulator is None:
            raise DemoFailed("sushy-tools is not installed (pip install sushy-tools)")
        self.spawn("emulator", [emulator, "--config", str(conf)])
        self.wait("the Redfish emulator answers", lambda: self.power() == "Off")
        self.say(f"A Redfish BMC (sushy-tools' emulator) serves machine {MACHINE}: power Off.")

    def start_provisioner(self) -> None:
        config = self.tmp / "provisioner.yaml"
        config.write_text(
            f"controller: {{url: {self.url}, token_file: {self.tmp / 'prov-token'}}}\n"
            "interval: 0.5s\ngraceful_timeout: 30s\nsettle_timeout: 15s\n"
            f"bmcs: {{rack1: {{url: {self.bmc}, timeout: 3s}}}}\n"
            f"machines:\n  - {{name: {MACHINE}, instance_id: {INSTANCE}, template: rack-small,"
            f" bmc: rack1, system: {self.system}}}\n"
        )
        cmd = [sys.executable, "-m", "xce_provisioner", "run", "--config", str(config)]
        self.spawn("provisioner", cmd)
        self.say(f"xce-provisioner runs with an inventory of one machine ({MACHINE}).")

    def expect_and_power_on(self, again: str) -> None:
        body = {"instance_id": INSTANCE, "template": "rack-small", "expected_name": MACHINE}
        self.api("POST", "/v1/expected", PROV_TOKEN, json=body)
        self.say(f"Expected {INSTANCE} {again}(as `xcecli expect` does); the machine is off.")
        took = self.wait("powered on", lambda: self.power() == "On", PROMISE)
        self.say(f"The provisioner powered {MACHINE} on: On {took:.1f}s after the expect.")

    def boot_and_join(self) -> None:
        state = self.tmp / f"agent-state-{uuid.uuid4().hex[:6]}"  # a freshly imaged disk
        config = self.tmp / "agent.yaml"
        config.write_text(
            "version: 1\n"
            f"controller: {{url: '{self.url}', token: '{self.controller.join_token}'}}\n"
            f"instance: {{id: {INSTANCE}, template: rack-small, host_name: {MACHINE}}}\n"
            "roles:\n  worker:\n    components:\n      xce-worker:\n"
            f"        command: ['{sys.executable}', -m, xce_agent, sample-worker]\n"
            "        stop_timeout: 5s\n        decommission_exit_codes: [100]\n"
            f"state_directory: '{state}'\nlog_level: warning\n"
        )
        cmd = [sys.executable, "-m", "xce_agent", "run", "--config", str(config)]
        self.agent = self.spawn("agent", cmd)
        self.wait("joined", lambda: self.record().get("state") == "open")
        self.say(f"{MACHINE} booted: its agent joined and the host is open.")

    def run_a_job_and_decommission(self) -> None:
        job = self.api("POST", "/v1/jobs", json={"command": ["sleep", "2"]})
        self.wait("job runs", lambda: self.record().get("jobs_running") == 1)
        self.api("POST", f"/v1/hosts/{MACHINE}/decommission", json={"reason": "rack maintenance"})
        self.say(f"Job {job['id']} runs; decommissioned {MACHINE}: it drains, and stays on.")
        self.wait("drained", lambda: self.record().get("state") != "draining", 30)
        if self.power() != "On":
            raise DemoFailed("the machine went off before its drain ended")
        self.say("The job finished: the drain ended, the host is decommissioned.")
        took = self.wait("returned", lambda: self.record().get("state") == "returned", PROMISE)
        if self.power() != "Off":
            raise DemoFailed("returned while the machine is still on")
        self.say(f"Graceful shutdown, then returned: {took:.1f}s after the drain ended.")
        self.stop_agent()

    def stop_agent(self) -> None:
        """The machine is off: its agent is gone with it."""
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGKILL)
            self.agent.wait()

    def show_why(self) -> None:
        from xce_controller.core.story import story

        host = self.api("GET", f"/v1/hosts/{MACHINE}")
        answer = requests.get(
            f"{self.url}/v1/events",
            params={"host": INSTANCE},
            headers=self.controller.admin_headers,
            timeout=10,
        )
        events = [json.loads(line) for line in answer.text.splitlines() if line]
        self.say(f"`xcecli why {MACHINE}` tells both lives, each power step with its outcome:")
        for line in story(host, events, time.time()):
            self.out(f"          {line}")

    def cleanup(self) -> None:
        self.stop_agent()
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self.controller is not None:
            self.controller.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run_onprem_demo(out: Callable[[str], None] = print) -> int:
    demo = OnPremDemo(out)
    try:
        demo.run()
    except DemoFailed as exc:
        demo.say(f"FAILED: {exc}")
        for name in ("provisioner", "agent"):
            log = demo.tmp / f"{name}.log"
            if log.exists():
                out(f"--- {name} log ---\n" + log.read_text()[-2000:])
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        demo.cleanup()
    demo.say("Done: every step happened as shown; all processes and files are cleaned up.")
    return 0
