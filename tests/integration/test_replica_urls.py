"""Agents, their workers and xcecli reach the controller's replicas by their own list.

On the SQLite store a controller is one process on its own file, so here the second
controller stands in for a replica by starting from a backup of the first one's store taken
after the join: it knows the host and its credentials as the first does (live replicas on
PostgreSQL are test_replica_topologies.py's). What these tests
assert is the agent's behaviour: it moves to the next URL when the one it talks to dies or
answers 503, presents the credential it has, does not join again, keeps heartbeating, and
never takes a 503 for a refusal.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.agents import AgentProcess
from tests.integration.controller_proc import ControllerProcess, backup
from tests.integration.helpers import alive, wait_for
from xce_controller.store.sqlite import Store
from xce_protocol.times import parse_time

CLUSTER = """\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: 10s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
auth: {admin_token: adm1n, join_token: j0in}
defaults: {join_deadline: 10m, drain_timeout: 30s, drain_policy: requeue}
templates:
  default: {slots: 1}
"""
ADMIN = {"Authorization": "Bearer adm1n"}


def free_port() -> int:
    """A port for a controller that starts later (the agent's list names it from the start)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Busy:
    """A replica that cannot serve: every request answered 503 storage_unavailable."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []  # path, Authorization
        seen = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def _busy(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                seen.append((self.path, self.headers.get("Authorization", "")))
                body = json.dumps(
                    {"protocol": "1.1", "error": "storage_unavailable", "message": "disk I/O"}
                ).encode()
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Retry-After", "1")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _busy

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def busy() -> Iterator[Busy]:
    server = Busy()
    yield server
    server.close()


def api(ctl: ControllerProcess, method: str, path: str, **kw: Any) -> Any:
    return requests.request(method, ctl.url + path, headers=ADMIN, timeout=10, **kw).json()


def host(ctl: ControllerProcess, name: str) -> dict[str, Any]:
    result: dict[str, Any] = api(ctl, "GET", f"/v1/hosts/{name}")
    return result


def joins(db: Path, instance: str) -> int:
    store = Store(db)
    try:
        return sum(
            1 for f in store.facts() if f.kind == "joined" and f.data.get("instance_id") == instance
        )
    finally:
        store.close()


def test_the_agent_moves_to_the_next_replica_keeps_its_credential_and_heartbeats(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = ControllerProcess(tmp_path / "a", CLUSTER).start()
    second = ControllerProcess(tmp_path / "b", CLUSTER)
    second.port = free_port()
    urls = [first.url, f"http://127.0.0.1:{second.port}"]
    agent = AgentProcess(tmp_path, urls, "i-1", "n1", token="j0in").start()
    try:
        wait_for(lambda: host(first, "n1").get("state") == "open", timeout=30)
        wait_for(lambda: agent.worker_pid() is not None, timeout=30)
        worker = agent.worker_pid()
        assert worker is not None
        backup(first, second)
        second.start()
        incarnation = host(second, "n1")["incarnation"]
        first.kill()  # the replica the agent talks to dies

        def beats_on_second() -> float:
            return parse_time(host(second, "n1").get("last_seen")) or 0.0

        wait_for(lambda: beats_on_second() > 0, timeout=30)
        seen = beats_on_second()
        wait_for(lambda: beats_on_second() > seen, timeout=10)  # and it keeps heartbeating
        record = host(second, "n1")
        assert record["state"] == "open" and record["incarnation"] == incarnation
        assert f"now at {urls[1]}" in agent.log()
        # The worker moved too, with its own credential: a job given on the second one runs.
        job = api(second, "POST", "/v1/jobs", json={"command": ["sleep", "30"], "host": "n1"})

        def job_state() -> str:
            return str(
                next(j for j in api(second, "GET", "/v1/jobs") if j["id"] == job["id"])["state"]
            )

        wait_for(lambda: job_state() == "running", timeout=30)
        assert agent.worker_pid() == worker and alive(worker)  # never stopped, never restarted
        assert "joining again" not in agent.log() and "refused" not in agent.log()
    finally:
        agent.stop()
        second.stop()
        first.kill()
    assert joins(second.db, "i-1") == 1  # the copy's join, and no second one


def test_a_replica_answering_503_is_passed_over_and_is_never_a_refusal(
    tmp_path: Path, busy: Busy
) -> None:
    ctl = ControllerProcess(tmp_path, CLUSTER).start()
    agent = AgentProcess(tmp_path, [busy.url, ctl.url], "i-2", "n2", token="j0in").start()
    try:
        wait_for(lambda: host(ctl, "n2").get("state") == "open", timeout=30)
        assert any(path == "/v1/join" for path, _ in busy.requests)  # it was asked first
        wait_for(lambda: "checked in as n2" in agent.log(), timeout=30)  # the worker too
        worker = agent.worker_pid()
        asked = len(busy.requests)
        seen = parse_time(host(ctl, "n2").get("last_seen")) or 0.0
        wait_for(lambda: (parse_time(host(ctl, "n2").get("last_seen")) or 0.0) > seen, timeout=10)
        assert len(busy.requests) == asked  # it stays on the one that answers
        # Now the one that answered dies: only the busy one is left, answering 503.
        ctl.kill()
        wait_for(lambda: len(busy.requests) > asked + 2, timeout=30)
        assert any(auth.startswith("Bearer ") for _, auth in busy.requests[asked:])
        wait_for(
            lambda: agent.state().get("controller", {}).get("state") == "unreachable", timeout=30
        )
        assert agent.worker_pid() == worker and worker is not None and alive(worker)
        assert "refused" not in agent.log()
    finally:
        agent.stop()
        ctl.kill()


def test_xcecli_takes_a_comma_separated_list_and_moves_past_dead_and_busy_urls(
    tmp_path: Path, busy: Busy
) -> None:
    ctl = ControllerProcess(tmp_path, CLUSTER).start()
    dead = f"http://127.0.0.1:{free_port()}"
    cli = [sys.executable, "-m", "xce_controller.cli.xcecli", "--token", "adm1n"]
    try:
        api(ctl, "POST", "/v1/expected", json={"instance_id": "i-9", "template": "default"})
        shown = subprocess.run(
            [*cli, "--url", f"{dead},{busy.url},{ctl.url}", "hosts", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        assert [h["instance_id"] for h in json.loads(shown.stdout)] == ["i-9"]
        assert busy.requests  # the busy one was asked, and passed over
        urls = f"{dead},{busy.url},{ctl.url}"
        change = subprocess.run(
            [*cli, "--url", urls, "expect", "i-10", "--template", "default"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert change.returncode == 0, change.stderr  # never sent to the dead one: moved on
        expected = {h["instance_id"] for h in api(ctl, "GET", "/v1/expected")}
        assert expected == {"i-9", "i-10"}
        env = {"XCE_CONTROLLER_URL": f"{dead},{busy.url}", "PATH": "/usr/bin:/bin"}
        down = subprocess.run(
            [*cli, "hosts"], capture_output=True, text=True, timeout=60, check=False, env=env
        )
        assert down.returncode == 1  # the last one's 503: the controller's own answer
        assert "storage" in down.stderr or "disk I/O" in down.stderr
        bad = subprocess.run(
            [*cli, "--url", f"{ctl.url},ftp://x", "hosts"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert bad.returncode == 2 and "--url: expected http(s) URLs" in bad.stderr
    finally:
        ctl.stop()
