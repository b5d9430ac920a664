"""The agent on a real Python 3.9 with distribution packages: Debian 11's python3.9, click 7.1,
PyYAML 5.3, psutil 5.8, requests 2.25 and sdnotify 0.3 (RHEL 9 and Amazon Linux 2023 ship 3.9).

A bullseye rootfs (debootstrap, cached beside the bookworm one) runs, under systemd-nspawn
without booting, the agent's unit tests, the supervision integration tests, and a real agent
with the sample worker from this tree that joins the controller (run here, on the host's
loopback, which the container shares) and obeys its decommission. Needs root, debootstrap
and systemd-nspawn; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.machines import ensure_rootfs_cache, nspawn_command
from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("systemd-nspawn", "debootstrap", "zstd")
missing = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="a Python 3.9 rootfs needs root"),
    pytest.mark.skipif(
        bool(missing),
        reason=f"a Python 3.9 rootfs needs {', '.join(missing)} (make e2e-deps installs them)",
    ),
]

# Debian 11 has every runtime dependency of the agent, sdnotify included (0.3.1).
PACKAGES = (
    "python3,python3-click,python3-yaml,python3-psutil,python3-requests,python3-sdnotify,"
    "python3-pytest,procps"
)
CLUSTER = """\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: 10s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
unmatched_joins: refuse
templates:
  default: {slots: 1}
"""


@pytest.fixture(scope="module")
def rootfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tarball = ensure_rootfs_cache("bullseye", PACKAGES, "bullseye-py39-rootfs")
    root = tmp_path_factory.mktemp("py39") / "rootfs"
    root.mkdir()
    subprocess.run(["tar", "-C", str(root), "--zstd", "-xf", str(tarball)], check=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def run39(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        nspawn_command(root, *args), capture_output=True, text=True, timeout=timeout, check=False
    )


# What checks the development tree's generated files and examples with the build's click and
# installed commands (the reference, man pages, completion, example units), not the agent.
BUILD_CHECKS = {"tests/unit/test_clidocs.py", "tests/unit/test_examples.py"}


def agent_tests() -> list[str]:
    """Unit test files of the agent and the protocol: those that import no controller code."""
    found = []
    for path in sorted((ROOT / "tests/unit").glob("test_*.py")):
        if str(path.relative_to(ROOT)) in BUILD_CHECKS:
            continue
        if not re.search(r"^(from|import) xce_controller", path.read_text(), re.M):
            found.append(str(path.relative_to(ROOT)))
    return found


def test_the_rootfs_is_python_39_with_distribution_packages(rootfs: Path) -> None:
    probe = "import sys, click, yaml, psutil, requests, sdnotify; print(sys.version_info[:2])"
    out = run39(rootfs, "python3", "-c", probe)
    assert out.stdout.strip() == "(3, 9)", out.stdout + out.stderr


@pytest.mark.parametrize(
    "tests",
    [agent_tests(), ["tests/integration/test_supervision.py"]],
    ids=["agent-unit-tests", "supervision-integration"],
)
def test_under_python_39(rootfs: Path, tests: list[str]) -> None:
    out = run39(rootfs, "python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    passed = re.search(r"(\d+) passed", out.stdout)
    assert passed and int(passed.group(1)) >= 10, out.stdout[-2000:]


def test_agent_on_python_39_joins_and_obeys_a_decommission(rootfs: Path, tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, CLUSTER).start()
    work = tmp_path / "py39host"
    work.mkdir()
    (work / "agent.yaml").write_text(
        f"version: 1\ncontroller: {{url: '{ctl.url}', timeout: 2s, max_retry_delay: 1s, "
        f"token: '{ctl.join_token()}'}}\n"
        "instance: {id: i-py39, host_name: py39host}\n"
        "roles:\n  worker:\n    components:\n      worker:\n"
        "        command: [python3, -m, xce_agent, sample-worker]\n"
        "        stop_timeout: 5s\n        decommission_exit_codes: [100]\n"
        "state_directory: /srv/py39host/state\n"
    )
    headers = ctl.admin_headers()

    def api(method: str, path: str, **kw: Any) -> Any:
        return requests.request(method, ctl.url + path, headers=headers, timeout=10, **kw).json()

    def state() -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads((work / "state/state.json").read_text())
        except (OSError, ValueError):
            return {}
        return data

    api("POST", "/v1/expected", json={"instance_id": "i-py39", "template": "default"})
    command = nspawn_command(
        rootfs,
        "python3",
        "-m",
        "xce_agent",
        "run",
        "--config",
        "/srv/py39host/agent.yaml",
        binds=(f"{work}:/srv/py39host",),
    )
    with open(work / "agent.log", "wb") as log:
        agent = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: api("GET", "/v1/hosts/py39host").get("state") == "open", 60)
        wait_for(lambda: (state().get("components") or [{}])[0].get("phase") == "running", 60)
        version = api("GET", "/v1/hosts/py39host")
        assert version["key"] == "i-py39" and version["provisioned"]
        api("POST", "/v1/hosts/py39host/decommission", json={"reason": "py39 reclaim"})
        wait_for(lambda: (state().get("controller") or {}).get("state") == "decommissioned", 30)
        wait_for(lambda: state()["components"][0]["phase"] == "stopped", 30)
        assert state()["tombstone"]["reason"] == "py39 reclaim"
    except BaseException:
        print((work / "agent.log").read_text()[-4000:])
        raise
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
        ctl.stop()
    assert "Traceback" not in (work / "agent.log").read_text()
