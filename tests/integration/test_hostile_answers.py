"""Malformed and forged controller answers never stop the worker.

A small hostile HTTP server accepts the join (so the worker starts), then answers every
heartbeat and watch with one bad answer; the worker must keep running with the same pid.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agents import AgentProcess
from tests.integration.helpers import wait_for
from xce_agent.config import ControllerConfig
from xce_agent.controller_client import ControllerClient
from xce_protocol.protocol import Identity, Outcome

ACCEPT = {
    "protocol": "1.0",
    "status": "accepted",
    "host": "node1",
    "key": "i-1",
    "instance_id": "i-1",
    "provisioned": True,
    "state": "open",
    "heartbeat_interval": 0.3,
    "host_loss_grace": 5,
    "version": 1,
    "template": {
        "name": "default",
        "slots": 1,
        "type": "",
        "model": "",
        "resources": {},
        "host_groups": [],
        "dispatch_windows": [],
        "roles": ["worker"],
    },
}
REFUSAL = {
    "error": "decommissioned",
    "host": "node1",
    "instance_id": "i-1",
    "reason": "x",
    "protocol": "1.0",
    "message": "gone",
}

CASES: dict[str, tuple[int, Any]] = {
    "garbage-200": (200, b"\x00not json at all"),
    "html-404": (404, b"<html>not found</html>"),
    "refusal-with-5xx": (500, REFUSAL),
    "refusal-with-503": (503, REFUSAL),
    "refusal-for-another-host": (410, {**REFUSAL, "host": "node2"}),
    "refusal-for-another-instance": (410, {**REFUSAL, "instance_id": "i-2"}),
    "410-without-refusal": (410, {"error": "gone", "message": "?"}),
    "refusal-with-malformed-fields": (410, {**REFUSAL, "host": 7}),
    "refusal-without-reason": (410, {k: v for k, v in REFUSAL.items() if k != "reason"}),
    "decommissioned-state-in-a-200": (200, {**ACCEPT, "state": "decommissioned", "jobs": []}),
    "newer-major-protocol": (410, {**REFUSAL, "protocol": "2.0"}),
    "answer-for-another-host": (200, {**ACCEPT, "host": "node2", "jobs": []}),
    "json-list": (200, [REFUSAL]),
    "timeout": (-1, None),
    "connection-dropped": (-2, None),
}


def hostile_server(status: int, body: Any, join: Any = None) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, payload: Any) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _hostile(self) -> None:
            if status == -1:
                time.sleep(4)  # longer than the agent's 2 s timeout
                return
            if status == -2:
                self.close_connection = True
                self.connection.close()
                return
            self._send(status, body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            self.rfile.read(length)
            if self.path == "/v1/join":
                self._send(200, ACCEPT if join is None else join)
            else:
                self._hostile()

        def do_GET(self) -> None:
            time.sleep(0.1)
            self._hostile()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> Iterator[tuple[str, ThreadingHTTPServer]]:
    status, body = CASES[request.param]
    server = hostile_server(status, body)
    yield request.param, server
    server.shutdown()
    server.server_close()


def test_bad_answer_never_stops_the_worker(
    case: tuple[str, ThreadingHTTPServer], tmp_path: Path
) -> None:
    _, server = case
    url = f"http://127.0.0.1:{server.server_address[1]}"
    # A worker that does not talk to the controller itself: only the agent is under test.
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    agent = AgentProcess(tmp_path, url, "i-1", "node1", worker=sleeper).start()
    try:
        wait_for(agent.worker_pid)
        pid = agent.worker_pid()
        time.sleep(2.5)
        assert agent.worker_pid() == pid
        assert agent.state().get("tombstone") is None
        assert agent.state()["lifecycle"] == "running"
    finally:
        agent.stop()


def test_tls_failure_is_a_failed_contact_not_a_refusal() -> None:
    server = hostile_server(410, REFUSAL)  # would be a valid refusal over plain HTTP
    try:
        port = server.server_address[1]
        client = ControllerClient(
            ControllerConfig(f"https://127.0.0.1:{port}", timeout=2.0), Identity("node1", "i-1")
        )
        answer = client.heartbeat({})
        assert answer.outcome is Outcome.RETRY
        assert answer.detail == "TLS failure talking to the controller"
        plain = ControllerClient(
            ControllerConfig(f"http://127.0.0.1:{port}", timeout=2.0), Identity("node1", "i-1")
        )
        assert plain.heartbeat({}).outcome is Outcome.DECOMMISSIONED  # the control case
    finally:
        server.shutdown()
        server.server_close()


def test_join_answer_without_template_does_not_start_the_worker(tmp_path: Path) -> None:
    broken = {k: v for k, v in ACCEPT.items() if k != "template"}
    server = hostile_server(200, {**ACCEPT, "jobs": []}, join=broken)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    agent = AgentProcess(tmp_path, url, "i-1", "node1", worker=sleeper).start()
    try:
        wait_for(
            lambda: (
                agent.state().get("controller", {}).get("detail")
                == "join answer without a usable template"
            )
        )
        assert agent.worker().get("phase") == "stopped"
    finally:
        agent.stop()
        server.shutdown()
        server.server_close()
