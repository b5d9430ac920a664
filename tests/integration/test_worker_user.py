"""A worker running as another user reads its template and credential; nobody else does.

The worker here is `nobody` (a shell script, so it needs nothing but /bin/sh), the agent root.
The credential reaches it as an inherited in-memory file, never on disk; another unprivileged
uid must not read the template or the state, nor list the state directory. With the sample
worker and a real controller that wants a token, the job reports go through (so the worker
read its credential) while no job sees the token.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.agents import AgentProcess
from tests.integration.controller_proc import ControllerProcess
from tests.integration.fake_controller import ACCEPT, HOST, INSTANCE, FakeController
from tests.integration.helpers import wait_for

TOKEN = "s3cret-join-token"
STRANGER = 54321  # a uid with no passwd entry: "anybody else on the host"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory every user may pass through (pytest's tmp_path is 0700 root)."""
    path = Path(tempfile.mkdtemp(prefix="xce-worker-user-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_stranger(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), user=STRANGER, group=STRANGER, capture_output=True, text=True, check=False
    )


def test_worker_user_reads_template_and_credential_and_nobody_else_does(base: Path) -> None:
    out = base / "out"
    out.mkdir()
    os.chown(out, pwd.getpwnam("nobody").pw_uid, -1)
    script = (
        f'cd {out} && id -u > uid && cat "$XCE_TEMPLATE_FILE" > template '
        '&& cat "$XCE_CREDENTIAL_FILE" > credential '
        '&& { cat "$(dirname "$XCE_TEMPLATE_FILE")/state.json" > state 2>&1 || touch no-state; } '
        # Written aside and renamed: the test waits for env-token, then reads it whole.
        "&& { env | grep -c s3cret > env-token.new || true; } && mv env-token.new env-token "
        "&& exec sleep 600"
    )
    server = FakeController(lambda x: None, ())
    agent = AgentProcess(
        base,
        server.url,
        INSTANCE,
        HOST,
        worker=["/bin/sh", "-c", script],
        token=TOKEN,
        worker_user="nobody",
    )
    agent.start()
    try:
        wait_for((out / "env-token").exists, timeout=20)
        nobody = pwd.getpwnam("nobody")
        assert (out / "uid").read_text().strip() == str(nobody.pw_uid)
        assert json.loads((out / "template").read_text())["template"]["name"] == "default"
        # The worker's own credential from the join answer, never the join token.
        assert (out / "credential").read_text().strip() == ACCEPT["worker_credential"]
        assert (out / "no-state").exists()  # the state itself stays closed to the worker
        assert (out / "env-token").read_text().strip() == "0"  # no token in its environment

        state = agent.dir / "state"
        mode = os.stat(state)
        assert stat.S_IMODE(mode.st_mode) == 0o710 and mode.st_gid == nobody.pw_gid
        info = os.stat(state / "template.json")
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (nobody.pw_uid, 0o400)
        assert not any(TOKEN in p.read_text(errors="replace") for p in state.rglob("*.json"))
        assert not (state / "credential").exists()
        assert stat.S_IMODE(os.stat(state / "credential.json").st_mode) == 0o600
        for name in ("template.json", "state.json", "credential.json"):
            denied = as_stranger("/bin/cat", str(state / name))
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, name
        assert as_stranger("/bin/ls", str(state)).returncode != 0
    finally:
        agent.stop()
        server.close()


CLUSTER = f"""\
version: 1
heartbeat_interval: 1s
host_loss_grace: 10s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
auth: {{join_token: {TOKEN}}}
templates:
  default: {{slots: 1}}
"""


def test_jobs_never_see_the_credential(tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, CLUSTER).start()
    agent = AgentProcess(tmp_path, ctl.url, "i-1", "node1", token=TOKEN).start()
    try:
        wait_for(agent.worker_pid, timeout=20)
        worker_env = _environ(agent.worker_pid() or 0)
        assert TOKEN not in json.dumps(worker_env)
        assert worker_env["XCE_CREDENTIAL_FILE"].startswith("/dev/fd/")
        stored = json.loads((agent.dir / "state" / "credential.json").read_text())
        host_secret, worker_secret = stored["secret"], stored["worker_secret"]
        assert worker_secret and worker_secret != host_secret
        assert host_secret not in json.dumps(worker_env)
        # The worker was handed its own credential (an inherited in-memory file), nothing else.
        worker_fd = worker_env["XCE_CREDENTIAL_FILE"].removeprefix("/dev/fd/")
        assert (
            os.readlink(f"/proc/{agent.worker_pid()}/fd/{worker_fd}").startswith(
                "/memfd:xce-credential"
            )
            or not Path(f"/proc/{agent.worker_pid()}/fd/{worker_fd}").exists()
        )  # read and closed
        seen = tmp_path / "job-env"
        probe = f'env > {seen}; echo "token=$XCE_TOKEN" >> {seen}; ls -l /proc/$$/fd/ >> {seen}'
        command = ["/bin/sh", "-c", probe]
        job = _api(ctl, "POST", "/v1/jobs", json={"command": command, "host": "node1"})

        # "done" needs the worker's own reports, which the controller takes only with the token.
        def state() -> str:
            return str(
                next(j for j in _api(ctl, "GET", "/v1/jobs") if j["id"] == job["id"])["state"]
            )

        wait_for(lambda: state() == "done", 20)
        text = seen.read_text(errors="replace")
        assert TOKEN not in text and "XCE_CREDENTIAL_FILE" not in text
        assert "XCE_JOB_ID=" in text and "XCE_TEMPLATE_FILE" not in text
        # No descriptor of the worker's reached the job: not its credential file, not any.
        assert " -> " in text  # the job listed its descriptors
        assert worker_secret not in text and host_secret not in text and "memfd" not in text

        # What the worker credential can do: its host's watch and job reports, nothing else.
        def call(method: str, path: str, **kw: Any) -> tuple[int, str]:
            auth = {"Authorization": f"Bearer {worker_secret}"}
            r = requests.request(method, ctl.url + path, headers=auth, timeout=10, **kw)
            return r.status_code, r.json().get("error", "") if r.status_code >= 400 else ""

        assert call("GET", "/v1/hosts/node1/watch?timeout=0") == (200, "")
        assert call("POST", "/v1/join", json={"host": "fake1"}) == (401, "unauthorized")
        assert call("POST", "/v1/join", json={"host": "node1", "instance_id": "i-1"}) == (
            401,
            "unauthorized",
        )
        assert call("POST", "/v1/hosts/node1/heartbeat", json={}) == (401, "unknown_credential")
        notice = {"kind": "shutdown"}
        assert call("POST", "/v1/hosts/node1/notice", json=notice) == (401, "unknown_credential")
        assert call("GET", "/v1/hosts") == (401, "unauthorized")
        hosts = _api(ctl, "GET", "/v1/hosts")
        assert [h["name"] for h in hosts] == ["node1"] and hosts[0]["state"] == "open"
    finally:
        agent.stop()
        ctl.stop()


def _api(ctl: ControllerProcess, method: str, path: str, **kw: Any) -> Any:
    response = requests.request(
        method, ctl.url + path, headers=ctl.admin_headers(), timeout=10, **kw
    )
    return response.json()


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


READS_TEMPLATE = 'cat "$XCE_TEMPLATE_FILE" >/dev/null || exit 1; echo read-it; sleep 600'


def test_a_template_deleted_under_the_agent_is_written_again_for_the_next_start(
    base: Path,
) -> None:
    # The worker reads its template at every start; deleted under the agent, every restart
    # failed at once until the crash loop stopped the worker for good.
    server = FakeController(lambda x: None, ())
    agent = AgentProcess(
        base,
        server.url,
        INSTANCE,
        HOST,
        worker=["/bin/sh", "-c", READS_TEMPLATE],
        worker_user="nobody",
    )
    agent.start()
    try:
        wait_for(lambda: "worker: read-it" in agent.log() and agent.worker_pid(), timeout=20)
        first = agent.worker_pid()
        assert first is not None
        template = agent.dir / "state" / "template.json"
        template.unlink()
        os.kill(first, 9)
        wait_for(lambda: agent.worker_pid() not in (None, first), timeout=15)
        wait_for(lambda: agent.log().count("worker: read-it") == 2, timeout=15)
        assert "template.json was removed or changed: writing it again" in agent.log()
        assert agent.worker()["restarts"] == 1  # the first start after the deletion had it
        info = os.stat(template)
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (pwd.getpwnam("nobody").pw_uid, 0o400)
        server.set_phase("refuse")  # and a refusal still stops it
        wait_for(lambda: agent.worker().get("phase") == "stopped", timeout=10)
        assert agent.state().get("tombstone") is not None
    finally:
        agent.stop()
        server.close()
