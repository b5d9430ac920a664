"""End to end: an instance whose agent is never accepted powers itself off.

The container boots the .deb with user-data from `render-user-data --join-deadline 20s`; the
controller refuses unmatched joins, so the agent is refused until the deadline, logs why,
and runs `systemctl poweroff`: the container stops by itself, and its kept state directory
says when the agent gave up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.machines import Machine
from tests.integration.controller_proc import ControllerProcess

TOOLS = ("systemd-nspawn", "debootstrap", "dpkg-buildpackage", "nsenter", "zstd")
missing = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="end-to-end boot needs root"),
    pytest.mark.skipif(
        bool(missing),
        reason=f"end-to-end boot needs {', '.join(missing)} (make e2e-deps installs them)",
    ),
]

CLUSTER = """\
version: 1
heartbeat_interval: 1s
host_loss_grace: 30s
agent_max_restart_backoff: 5s
rejoin_allowance: 5s
unmatched_joins: refuse
auth: {join_token: e2e-join-token}
templates:
  default: {slots: 1}
"""
DEADLINE = 20


@pytest.fixture(scope="module")
def image(agent_image: Path) -> Path:
    return agent_image  # shared: see tests/e2e/conftest.py


def test_a_host_never_accepted_powers_off(image: Path, tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, CLUSTER).start()
    token = tmp_path / "token"
    token.write_text("e2e-join-token\n")
    user_data = subprocess.run(
        [
            sys.executable,
            "-m",
            "xce_agent",
            "render-user-data",
            "--controller-url",
            ctl.url,
            "--token-file",
            str(token),
            "--worker-command",
            "/usr/bin/xce-agent sample-worker",
            "--join-deadline",
            f"{DEADLINE}s",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "on_join_timeout: poweroff" in user_data
    machine = Machine(image, tmp_path, "orphan", "i-orphan-1", user_data)
    try:
        machine.boot()
        booted = time.monotonic()
        machine.wait_for((machine.state / "join.json").exists, 60, "agent start")
        # Refused (this instance is not expected) until the deadline: no poweroff before it.
        machine.wait_for(lambda: "unmatched" in machine.journal(), 60, "the refusal")
        assert machine.proc is not None and machine.proc.poll() is None
        machine.proc.wait(timeout=DEADLINE + 120)  # it powers itself off
        assert machine.proc.returncode == 0, "nspawn ends cleanly when the container powers off"
        assert time.monotonic() - booted >= DEADLINE - 5
        record = json.loads((machine.state / "join.json").read_text())
        assert record["instance_id"] == "i-orphan-1" and not record["joined"]
        assert record["gave_up_at"] - record["first_start"] >= DEADLINE
    finally:
        machine.shutdown()
        ctl.stop()
