"""End to end: a host whose worker runs as a non-root user, booted from user-data under systemd.

The user-data comes from `render-user-data --worker-user --token-file`, the controller wants
the token, and the worker (the sample worker, as `xceworker`) must read its template and its
credential, join, and report a job; the job, running as the worker's user, must find the token
nowhere (environment, disk, the worker's descriptors and /proc entries). The image has no
such user: cloud-init adds it from the user-data's `users:` entry.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import requests

from tests.e2e import test_boot
from tests.e2e.machines import Machine
from tests.e2e.test_boot import render, state_of, worker_pid
from tests.integration.controller_proc import ControllerProcess

TOKEN = "e2e-worker-user-token"
USER = "xceworker"
CLUSTER = f"""\
version: 1
heartbeat_interval: 1s
host_loss_grace: 30s
agent_max_restart_backoff: 5s
rejoin_allowance: 5s
unmatched_joins: refuse
auth: {{join_token: {TOKEN}}}
templates:
  default: {{slots: 2}}
"""
# Everything a job could try, as the worker's user; none of it may print the join token, the
# host credential or the worker's credential.
PROBE = (
    "id -un; env; cat /var/lib/xce-agent/credential.json /var/lib/xce-agent/state.json; "
    'for f in /proc/$PPID/fd/*; do cat "$f" </dev/null; done; cat /proc/$PPID/environ; '
    "cat /proc/$PPID/mem; ls -l /proc/$$/fd/; cat /etc/xce/join-token; true"
)

pytestmark = test_boot.pytestmark  # root and the e2e tools, or skipped with the reason


def user_data(url: str, token_file: Path) -> str:
    # The image has no such user: the rendered user-data's users: entry makes cloud-init add it.
    return render(url, ["--token-file", str(token_file), "--worker-user", USER])


def test_worker_as_a_user_reads_its_template_and_jobs_never_see_the_token(
    agent_image: Path, tmp_path: Path
) -> None:
    base = agent_image  # shared, booted but never changed: see tests/e2e/conftest.py
    ctl = ControllerProcess(tmp_path, CLUSTER).start()
    token_file = tmp_path / "join-token"
    token_file.write_text(TOKEN + "\n")

    def api(method: str, path: str, **kw: Any) -> Any:
        headers = ctl.admin_headers()
        return requests.request(method, ctl.url + path, timeout=10, headers=headers, **kw).json()

    api("POST", "/v1/expected", json={"instance_id": "i-e2e-w", "template": "default"})
    m = Machine(base, tmp_path, "hostw", "i-e2e-w", user_data(ctl.url, token_file))
    try:
        m.boot()
        m.wait_for(lambda: m.show("ActiveState")["ActiveState"] == "active", 150, "agent active")
        m.wait_for(lambda: worker_pid(m), 90, "worker running")
        pid = worker_pid(m)
        assert m.run("ps", "-o", "user=", "-p", str(pid)).stdout.strip() == USER
        # It read the template (its slots are in its log) and its credential (the join above
        # and the job reports below need the token), and it is not crash-looping.
        m.wait_for(lambda: "with 2 slots" in m.journal(), 30, "worker joined")
        assert state_of(m)["components"][0]["restarts"] == 0
        uid = int(m.run("id", "-u", USER).stdout)
        entry = m.run("getent", "passwd", USER).stdout.strip().split(":")
        assert entry[6] == "/usr/sbin/nologin" and uid < 1000  # a system user, no login
        info = os.stat(m.state / "template.json")
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (uid, 0o400)
        assert stat.S_IMODE(os.stat(m.state).st_mode) == 0o710
        assert not (m.state / "credential").exists()

        job = api("POST", "/v1/jobs", json={"command": ["sh", "-c", PROBE], "host": "hostw"})

        def job_state() -> str:
            return str(next(j for j in api("GET", "/v1/jobs") if j["id"] == job["id"])["state"])

        m.wait_for(lambda: job_state() == "done", 60, "job done")
        journal = m.journal()
        assert f"xce-worker: {USER}" in journal  # the probe's `id -un`, through the worker's output
        assert "credential.json: Permission denied" in journal  # the probe ran its reads
        stored = json.loads((m.state / "credential.json").read_text())
        for secret in (TOKEN, stored["secret"], stored["worker_secret"]):
            assert secret and secret not in journal
        assert "memfd" not in journal  # no descriptor of the worker's reached the job
        assert TOKEN not in (m.state / "state.json").read_text()
        # The worker's credential registers no host and speaks for its host only in its watch
        # and job reports (the job above went through them).
        auth = {"Authorization": f"Bearer {stored['worker_secret']}"}
        fake = requests.post(ctl.url + "/v1/join", json={"host": "fake1"}, headers=auth, timeout=10)
        assert fake.status_code == 401
        beat = requests.post(
            ctl.url + "/v1/hosts/hostw/heartbeat", json={}, headers=auth, timeout=10
        )
        assert beat.json()["error"] == "unknown_credential"
    except BaseException:
        (tmp_path / "journal.txt").write_text(m.journal())
        sys.stderr.write(f"--- journal ---\n{m.journal()[-4000:]}\n")
        raise
    finally:
        m.shutdown()
        ctl.stop()
