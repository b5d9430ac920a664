"""End to end: a booted host hears a spot notice from the metadata emulator, and `poweroff`
inside it gets its jobs requeued at once, not after the host-loss grace.

The emulator runs as its own process on the host's loopback; the container shares the host's
network, so the agent inside reaches it at 127.0.0.1 as it would reach 169.254.169.254.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.e2e.machines import Machine, boot_marks
from tests.integration.controller_proc import ControllerProcess
from tests.metadata_emulator import spot

ROOT = Path(__file__).resolve().parents[2]
pytestmark = boot_marks()

GRACE = 30.0
CLUSTER = f"""\
version: 1
heartbeat_interval: 1s
host_loss_grace: {GRACE:g}s
agent_max_restart_backoff: 5s
rejoin_allowance: 5s
templates:
  default: {{slots: 2}}
notices: {{margin: 10s}}
"""


@pytest.fixture(scope="module")
def image(agent_image: Path) -> Path:
    return agent_image  # shared: see tests/e2e/conftest.py


class EmulatorProcess:
    """tests/metadata_emulator.py as a process on 127.0.0.1, driven over HTTP."""

    def __init__(self, workdir: Path) -> None:
        port_file = workdir / "emulator.port"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.metadata_emulator", "--port-file", str(port_file)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("metadata emulator did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port_file.read_text().strip()}"

    def change(self, values: dict[str, Any]) -> None:
        r = requests.post(f"{self.url}/_emulator/change", json={"set": values}, timeout=5)
        r.raise_for_status()

    def requests_served(self) -> int:
        return int(requests.get(f"{self.url}/_emulator/state", timeout=5).json()["requests"])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def user_data(controller_url: str, metadata_url: str, token_file: Path) -> str:
    rendered = subprocess.run(
        [
            sys.executable,
            "-m",
            "xce_agent",
            "render-user-data",
            "--controller-url",
            controller_url,
            "--template",
            "default",
            "--instance-id",
            "auto",
            "--worker-command",
            "/usr/bin/xce-agent sample-worker",
            "--token-file",
            str(token_file),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    doc = yaml.safe_load(rendered)
    [entry] = [f for f in doc["write_files"] if f["path"] == "/etc/xce/agent.yaml"]
    config = yaml.safe_load(entry["content"])
    config["cloud"] = {"provider": "aws", "metadata_url": metadata_url, "poll_interval": "1s"}
    entry["content"] = yaml.safe_dump(config, sort_keys=False)
    return "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False)


def test_spot_notice_then_poweroff_requeues_at_once(image: Path, tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, CLUSTER).start()
    emulator = EmulatorProcess(tmp_path)
    admin = ctl.admin_headers()

    def api(method: str, path: str, **kw: Any) -> Any:
        return requests.request(method, ctl.url + path, timeout=10, headers=admin, **kw).json()

    recorded = api(
        "POST",
        "/v1/expected",
        json={
            "instance_id": "i-e2e-spot",
            "template": "default",
            "expected_name": "spot1",
            "mint_join_token": True,
        },
    )
    token = tmp_path / "join-token"
    token.write_text(recorded["join_token"] + "\n")
    data = user_data(ctl.url, emulator.url, token)
    machine = Machine(image, tmp_path, "spot1", "i-e2e-spot", data)
    try:
        machine.boot()
        machine.wait_for(lambda: api("GET", "/v1/hosts/spot1")["state"] == "open", 180, "join")
        job = api("POST", "/v1/jobs", json={"command": ["sleep", "600"], "host": "spot1"})

        def job_state() -> str:
            return str(next(j for j in api("GET", "/v1/jobs") if j["id"] == job["id"])["state"])

        machine.wait_for(lambda: job_state() == "running", 60, "job running")
        served = emulator.requests_served()
        machine.wait_for(lambda: emulator.requests_served() > served + 3, 30, "metadata polled")

        # The spot notice: the host closes at once; the job runs on until deadline - margin.
        emulator.change(spot(time.time() + 120))
        machine.wait_for(lambda: api("GET", "/v1/hosts/spot1")["state"] == "closed", 15, "closed")
        notice = api("GET", "/v1/hosts/spot1")["notice"]
        assert notice["kind"] == "preemption" and notice["provider"] == "aws"
        assert job_state() == "running"

        # poweroff: the agent announces the shutdown before it stops the worker.
        started = time.monotonic()
        machine.run("systemctl", "--no-block", "poweroff")
        deadline = started + GRACE
        while job_state() != "pending":
            assert time.monotonic() < deadline, "job not requeued before the grace"
            time.sleep(0.05)
        requeued_after = time.monotonic() - started
        sys.stderr.write(f"poweroff -> job requeued in {requeued_after:.2f}s\n")
        assert requeued_after < 5.0  # a second on an idle machine; the grace is 30 s
        note = next(j for j in api("GET", "/v1/jobs") if j["id"] == job["id"])["note"]
        assert "shutdown notice" in note
        assert machine.proc is not None
        machine.proc.wait(timeout=120)
        host = api("GET", "/v1/hosts/spot1")
        assert host["report"]["agent_state"] == "stopping"
        assert host["notice"]["kind"] == "shutdown"
    except BaseException:
        (tmp_path / "journal.txt").write_text(machine.journal())
        sys.stderr.write(f"--- journal ---\n{machine.journal()[-4000:]}\n")
        raise
    finally:
        machine.shutdown()
        emulator.stop()
        ctl.stop()
