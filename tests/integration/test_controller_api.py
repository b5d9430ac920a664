"""The reference controller as a real process: REST flows (faults: test_controller_faults.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for, watch_for_change, watches_held
from xce_protocol.protocol import PROTOCOL

CONFIG = """\
version: 1
heartbeat_interval: 1s
host_loss_grace: 3s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
defaults: {join_deadline: 10m, drain_timeout: 5m, drain_policy: requeue}
auth: {admin_token: adm1n, join_token: j0in-t0ken}
templates:
  default: {slots: 2}
  gpu-large: {type: X86_64, model: gpu, slots: 8, host_groups: [gpu], roles: [worker]}
"""
ADMIN = {"Authorization": "Bearer adm1n"}
JOIN = {"Authorization": "Bearer j0in-t0ken"}


# On PostgreSQL too: all but the malformed requests (refused before any store is touched).
PG_TESTS = {
    "test_provisioned_join_gets_its_template",
    "test_admin_calls_need_the_token",
    "test_watch_returns_as_soon_as_the_host_changes",
    "test_jobs_drain_and_to_return_through_xcecli",
}


@pytest.fixture
def ctl(tmp_path: Path, store_db: str) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(tmp_path, CONFIG, db=store_db).start()
    yield proc
    proc.stop()


def post(
    ctl: ControllerProcess,
    path: str,
    body: object = None,
    admin: bool = True,
    bearer: str = "",
    **kw: object,
) -> requests.Response:
    """An admin call; else an agent's: with `bearer` (its host credential) or the join token."""
    headers = ADMIN if admin else ({"Authorization": f"Bearer {bearer}"} if bearer else JOIN)
    return requests.post(ctl.url + path, json=body or {}, headers=headers, timeout=10, **kw)  # type: ignore[arg-type]


def get(ctl: ControllerProcess, path: str, **params: object) -> requests.Response:
    return requests.get(ctl.url + path, headers=ADMIN, params=params, timeout=10)  # type: ignore[arg-type]


def test_provisioned_join_gets_its_template(ctl: ControllerProcess) -> None:
    r = post(
        ctl,
        "/v1/expected",
        {"instance_id": "i-1", "template": "gpu-large", "expected_name": "gpu1", "provider": "aws"},
    )
    assert r.status_code == 201 and r.json()["state"] == "expected"
    r = post(
        ctl,
        "/v1/join",
        {"host": "gpu1", "instance_id": "i-1", "boot_id": "b1", "future_field": 1},
        admin=False,
    )
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "accepted" and body["provisioned"] is True
    assert body["template"]["slots"] == 8 and body["template"]["host_groups"] == ["gpu"]
    assert body["heartbeat_interval"] == 1.0 and body["host_loss_grace"] == 3.0
    detail = get(ctl, "/v1/hosts/gpu1").json()
    assert detail["provider"] == "aws" and detail["joined_at"] is not None
    assert [c["state"] for c in detail["history"]] == ["expected", "open"]


def test_admin_calls_need_the_token(ctl: ControllerProcess) -> None:
    r = requests.get(ctl.url + "/v1/hosts", timeout=5)
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    r = requests.get(ctl.url + "/v1/hosts", headers={"Authorization": "Bearer nope"}, timeout=5)
    assert r.status_code == 401


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/join", b"not json"),
        ("/v1/join", b'{"host": ""}'),
        ("/v1/join", b'{"host": 5}'),
        ("/v1/join", b"[]"),
        ("/v1/expected", b'{"instance_id": "x"}'),
        ("/v1/expected", b'{"instance_id": "x", "template": "nope"}'),
        ("/v1/jobs", b'{"command": []}'),
        ("/v1/hosts/ghost/decommission", b"{}"),
        ("/v1/hosts/x/heartbeat", b'{"components": "no"}'),
    ],
)
def test_malformed_requests_get_a_4xx_json_error(
    ctl: ControllerProcess, path: str, body: bytes
) -> None:
    r = requests.post(
        ctl.url + path, data=body, timeout=5, headers={**ADMIN, "Content-Type": "application/json"}
    )
    assert 400 <= r.status_code < 500
    assert isinstance(r.json()["error"], str) and r.json()["message"]


def held(ctl: ControllerProcess) -> int:
    return watches_held(requests.get(ctl.url + "/metrics", headers=ADMIN, timeout=10).text)


def test_watch_returns_as_soon_as_the_host_changes(ctl: ControllerProcess) -> None:
    cred = post(ctl, "/v1/join", {"host": "n1"}, admin=False).json()["credential"]
    version = post(ctl, "/v1/hosts/n1/heartbeat", {}, admin=False, bearer=cred).json()["version"]
    answers: list[requests.Response] = []

    def watch(since: int) -> requests.Response:
        return requests.get(
            ctl.url + "/v1/hosts/n1/watch",
            params={"since": since, "timeout": 20},
            headers={"Authorization": f"Bearer {cred}"},
            timeout=30,
        )

    watcher = threading.Thread(target=lambda: answers.append(watch_for_change(watch, version)))
    watcher.start()
    wait_for(lambda: held(ctl) == 1)  # held before the change
    began = time.monotonic()
    post(ctl, "/v1/hosts/n1/decommission", {"reason": "test"})
    watcher.join(10)
    assert time.monotonic() - began < 5
    (r,) = answers
    assert r.status_code == 410
    assert r.json() == {
        "error": "decommissioned",
        "code": "refused_decommissioned",
        "host": "n1",
        "instance_id": "",
        "reason": "test",
        "protocol": PROTOCOL,
        "message": "host n1 (instance -) was decommissioned: test",
    }


def test_jobs_drain_and_to_return_through_xcecli(ctl: ControllerProcess) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "xce_controller.cli.xcecli",
                "--url",
                ctl.url,
                "--token",
                "adm1n",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )

    assert cli("expect", "i-7", "--template", "default", "--name", "n7").returncode == 0
    cred = post(ctl, "/v1/join", {"host": "n7", "instance_id": "i-7"}, admin=False).json()
    assert cred["incarnation"] == 1
    assert "job 1 assigned" in cli("submit", "--", "sleep", "100").stdout
    post(ctl, "/v1/hosts/n7/jobs/1/started", {}, admin=False, bearer=cred["credential"])
    out = cli("decommission", "n7", "--policy", "kill", "--drain-timeout", "0.5")
    assert "n7: draining" in out.stdout
    wait_for(lambda: "n7" not in cli("hosts").stdout, timeout=15)  # the drain ran out
    hosts = cli("hosts", "--all")
    assert "decommissioned" in hosts.stdout and "i-7" in hosts.stdout
    assert "n7" not in cli("hosts").stdout
    assert "killed" in cli("jobs").stdout
    assert "i-7" in cli("to-return").stdout
    assert cli("to-return", "--ack", "i-7").stdout.strip() == "i-7: returned"
    bad = cli("decommission", "ghost")
    assert bad.returncode == 1 and bad.stderr.strip() == "xcecli: 404: no host ghost"
    host = cli("host", "n7")
    assert "history:" in host.stdout and "returned" in host.stdout


def test_without_a_configured_admin_token_one_is_made_beside_the_database(tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, "version: 1\ntemplates:\n  default: {slots: 1}\n").start()
    try:
        token_file = Path(f"{ctl.db}.admin-token")
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert requests.get(ctl.url + "/v1/hosts", timeout=5).status_code == 401
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "xce_controller.cli.xcecli",
                "--url",
                ctl.url,
                "--token-file",
                str(token_file),
                "hosts",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0 and out.stdout.strip() == "[]"
    finally:
        ctl.stop()
